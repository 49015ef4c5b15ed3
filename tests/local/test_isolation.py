"""run-local gives each task what its pod has (tf_cluster/localrun/sandbox.py): its own /tmp, a read-only
root, its hostname, PID 1, the image's working directory; shared claims only where mounted."""

from __future__ import annotations

import os
import textwrap

import pytest

from rendering import render
from tf_cluster import ROOT, manifests
from tf_cluster.localrun.local_runner import LocalRunner
from tf_cluster.localrun.processes import sandbox_problem

pytestmark = pytest.mark.skipif(
    bool(sandbox_problem()), reason=f"this machine refuses the namespaces run-local isolates with: {sandbox_problem()}"
)

# Each task writes its own name to /tmp/x, then marks itself on the shared claim and waits until
# the other has done the same (a handshake, not a sleep: however late the second task starts, both
# have written before either reads), and reads its own back; then reports what the pod looks like.
# No TensorFlow: the cluster's shape is what matters.
PROGRAM = textwrap.dedent(
    """
    import json, os, socket, sys, time
    x = os.path.join("/", "tmp", "x")  # not spelled out: --no-isolation rewrites paths it sees in argv
    me = "%s-%d" % (socket.gethostname(), os.getpid())  # unique with or without isolation
    seen_before = os.path.exists(x)
    with open(x, "w") as f:
        f.write(me)
    open("/mnt/checkpoints/" + me, "w").close()
    deadline = time.time() + 60
    while len(os.listdir("/mnt/checkpoints")) < 2 and time.time() < deadline:
        time.sleep(0.2)
    mine = open(x).read() == me
    try:
        open(sys.argv[1], "w").close()
        root_writable = True
    except OSError:
        root_writable = False
    print("FACTS " + json.dumps({
        "me": me, "seen_before": seen_before, "mine": mine, "root_writable": root_writable, "cwd": os.getcwd(),
        "pid": os.getpid(), "hostname": socket.gethostname(), "home": os.environ.get("HOME"),
        "shared": sorted(os.listdir("/mnt/checkpoints")),
    }), flush=True)
    sys.exit(0 if mine and not seen_before else 1)
    """
)


def two_tasks(tmp_path, *, isolate):
    values = {
        "strategy": "custom",
        "command": ["python3", "-c", PROGRAM, str(ROOT / "written-by-a-task")],
        "roles": {"worker": {"replicas": 2}},
        "storage": {"checkpoints": {"type": "pvc"}},
        "jobPolicies": {"worker": {"backoffLimitPerIndex": 0}},
    }
    docs = render(values)
    facts: dict[str, dict] = {}

    def on_line(task, line):
        if line.startswith("FACTS "):
            import json

            facts[task.name] = json.loads(line[6:])

    r = LocalRunner(
        docs,
        manifests.pods(docs, node_cpus=2),
        tmp_path / "run",
        poll_seconds=0.5,
        restart_delay=1,
        on_line=on_line,
        isolate=isolate,
    )
    report = r.run(120, on_update=lambda text: None)
    return r, report, facts


def test_two_tasks_writing_the_same_tmp_path_do_not_see_each_others_file(tmp_path):
    r, report, facts = two_tasks(tmp_path, isolate=True)
    assert report.ok, [t.log_path.read_text()[-2000:] for t in r.cluster.tasks()]
    assert set(facts) == {"worker-0", "worker-1"}
    for t in r.cluster.tasks():
        f = facts[t.name]
        assert f["seen_before"] is False and f["mine"] is True
        assert f["root_writable"] is False, "the pod's root filesystem is read-only (readOnlyRootFilesystem)"
        assert f["cwd"] == "/tmp" and f["home"] == "/tmp"  # the image's WORKDIR and its user's home
        assert f["pid"] < 10  # its own PID namespace, where the launcher is PID 1
        assert f["hostname"] == t.pod.hostname  # <job>-<index>, as an Indexed Job's pod
        assert f["me"] in f["shared"] and f["me"].startswith(t.pod.hostname)  # the claim is shared: its own file
    # on this machine: one /tmp/x per pod, each with its own writer
    for name in ("worker-0", "worker-1"):
        x = tmp_path / "run" / "pods" / name / "tmp" / "x"
        assert x.read_text() == facts[name]["me"]
    # the shared claim holds both tasks' files
    claims = list((tmp_path / "run" / "volumes").iterdir())
    assert len(claims) == 1 and len(list(claims[0].iterdir())) == 2
    assert not (ROOT / "written-by-a-task").exists()
    assert r.cluster.private_files() == {"worker-0": ["/tmp/x (1 file)"], "worker-1": ["/tmp/x (1 file)"]}


def test_without_isolation_the_same_tasks_share_tmp(tmp_path):
    """The fallback (--no-isolation, or a kernel without namespaces) shares this machine's /tmp:
    the program's assumption goes unnoticed there, which is why isolation is the default."""
    r, report, facts = two_tasks(tmp_path, isolate=False)
    try:
        assert not report.ok
        assert set(facts) == {"worker-0", "worker-1"}, "both tasks report"
        # both wrote before either read (the handshake): the later writer's name is in the one /tmp/x
        assert sorted(f["mine"] for f in facts.values()) == [False, True], facts
    finally:
        (ROOT / "written-by-a-task").unlink(missing_ok=True)
        if os.path.isfile("/tmp/x"):  # what the tasks wrote (a directory there is not theirs)
            os.unlink("/tmp/x")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user (runuser); run as root to cover it")
def test_a_user_without_root_gets_the_same_isolation_through_a_user_namespace():
    """Not root: sandbox.py adds a user namespace (uid 0 inside, mapped to the caller) and builds
    the same read-only root with the task's own /tmp."""
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from tf_cluster.localrun.processes import SANDBOX

    if not shutil.which("runuser"):
        pytest.skip("runuser (util-linux) is not installed here")
    home = Path(tempfile.mkdtemp(prefix="tf-cluster-nobody-"))  # pytest's tmp_path is root's alone (0700)
    scratch = home / "probe"
    scratch.mkdir()
    home.chmod(0o755)
    os.chown(scratch, 65534, 65534)  # nobody
    # The checkout may sit where nobody cannot reach it (`mktemp -d` makes 0700 folders): sandbox.py
    # is stdlib-only, so nobody runs a copy of it with the first interpreter it can execute.
    sandbox = home / "sandbox.py"
    shutil.copy(SANDBOX, sandbox)
    sandbox.chmod(0o644)

    def runs_as_nobody(exe) -> bool:
        return subprocess.run(["runuser", "-u", "nobody", "--", exe, "-c", "pass"], capture_output=True).returncode == 0

    candidates = (sys.executable, shutil.which("python3", path="/usr/local/bin:/usr/bin"))
    pythons = [exe for exe in candidates if exe and runs_as_nobody(exe)]
    if not pythons:
        shutil.rmtree(home)
        pytest.skip(f"no Python that user nobody may execute ({sys.executable} is in a folder closed to others)")
    r = subprocess.run(
        ["runuser", "-u", "nobody", "--", pythons[0], str(sandbox), "--probe", str(scratch)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    problem = r.stderr.strip()
    if r.returncode != 0 and ("unshare" in problem or "Operation not permitted" in problem):
        pytest.skip(f"this kernel refuses unprivileged user namespaces: {problem[-300:]}")
    assert r.returncode == 0, problem
    ok = scratch / "tmp" / "ok"
    try:
        assert ok.is_file() and ok.stat().st_uid == 65534  # written as the caller, through the mapping
    finally:
        shutil.rmtree(home)
