"""The chart's launcher, run for real around real child processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tf_cluster import CHART

LAUNCHER = CHART / "files" / "launcher.py"
sys.path.insert(0, str(LAUNCHER.parent))
import tf_cluster_launcher.common as launcher_common  # noqa: E402
import tf_cluster_launcher.dns as launcher_dns  # noqa: E402
import tf_cluster_launcher.fencing as launcher_fencing  # noqa: E402
import tf_cluster_launcher.gang as launcher_gang  # noqa: E402
import tf_cluster_launcher.incarnation as launcher_incarnation  # noqa: E402
import tf_cluster_launcher.informer as launcher_informer  # noqa: E402
import tf_cluster_launcher.kubeapi as launcher_kubeapi  # noqa: E402
import tf_cluster_launcher.leader as launcher_leader  # noqa: E402
import tf_cluster_launcher.peerpods as launcher_peerpods  # noqa: E402
import tf_cluster_launcher.selffence as launcher_selffence  # noqa: E402
import tf_cluster_launcher.task as launcher_task  # noqa: E402
import tf_cluster_launcher.tfconfig as launcher_tfconfig  # noqa: E402


def start(argv, tmp_path, prefix=(), **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "KUBERNETES_"))}
    full.update({"TF_CLUSTER_ROLE": "worker", "TF_TASK_INDEX": "1", **env})
    return subprocess.Popen(
        [*prefix, sys.executable, str(LAUNCHER), "--", *argv],
        env=full,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )


def cluster(*hosts):
    return json.dumps({"cluster": {"worker": [f"{h}:2222" for h in hosts]}, "task": {"type": "worker", "index": 1}})


def test_waits_for_peers_that_resolve_then_runs_the_command(tmp_path):
    p = start([sys.executable, "-c", "import sys; sys.exit(17)"], tmp_path, TF_CONFIG=cluster("localhost", "127.0.0.1"))
    out, err = p.communicate(timeout=30)
    assert p.returncode == 17  # the command's own exit code
    assert "all 2 peer(s) resolve" in err and "command exited with 17" in err


def test_the_first_line_names_the_task_and_the_cluster_size(tmp_path):
    """A pod's TF_CONFIG is composed from the run's ConfigMap; its log says which task it is, first."""
    p = start([sys.executable, "-c", "pass"], tmp_path, TF_CONFIG=cluster("localhost", "127.0.0.1"))
    _, err = p.communicate(timeout=30)
    lines = err.splitlines()
    assert p.returncode == 0
    size = len(cluster("localhost", "127.0.0.1"))
    assert lines[0] == f"[launcher worker-1] TF_CONFIG: task worker:1 of a cluster of worker 2 ({size} bytes)"


def test_times_out_naming_the_missing_peers(tmp_path):
    t0 = time.monotonic()
    p = start(
        [sys.executable, "-c", "print('never')"],
        tmp_path,
        TF_PEER="x",
        TF_CONFIG=cluster("localhost", "tf-worker-7.nowhere.invalid"),
        TF_CLUSTER_PEER_TIMEOUT="2",
    )
    out, err = p.communicate(timeout=30)
    assert p.returncode == launcher_common.EXIT_PEERS_TIMEOUT == 4
    assert "never" not in out
    assert "1 peer(s) never resolved: tf-worker-7.nowhere.invalid" in err
    assert 2 <= time.monotonic() - t0 < 20


SAVES_ON_SIGTERM = (
    "import signal, sys, time, pathlib\n"
    "def stop(*a):\n"
    "    time.sleep(0.5); pathlib.Path('checkpointed').write_text('saved'); sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.mark.parametrize("leader,rc", [("", 143), ("Complete", 0)], ids=["run-going-on", "leader-complete"])
def test_a_child_that_saves_and_exits_0_on_sigterm_is_not_a_success_unless_the_run_is_over(leader, rc, tmp_path):
    """Issue 43: a program that checkpoints and exits 0 on SIGTERM (TensorFlow's preemption
    handling, many scripts) made the launcher exit 0, so an evicted or preempted pod counted as a
    done index and a release could complete after a fraction of its epochs. It may finish its
    save; only the leading Job's completion makes its stop a success."""
    status = tmp_path / "leader"
    status.write_text(leader)
    p = start(
        [sys.executable, "-c", SAVES_ON_SIGTERM],
        tmp_path,
        TF_CLUSTER_LEADER_STATUS_FILE=str(status),
        TF_CLUSTER_LEADER_JOB="tf-chief",
    )
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    saved = tmp_path / "checkpointed"
    assert saved.is_file() and saved.read_text() == "saved", err  # it had its time to save
    assert "forwarding to the command's process group" in err, err
    assert p.returncode == rc, err
    if rc:
        assert "task stopped by signal 15 before the run was over (the command exited 0; exit 143" in err


def in_own_pid_namespace() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None


@pytest.mark.parametrize(
    "pid1",
    [
        False,
        pytest.param(
            True,
            marks=pytest.mark.needs("unshare as root", in_own_pid_namespace, "run as root with util-linux"),
        ),
    ],
    ids=["process", "pid-1"],
)
def test_sigterm_while_waiting_for_peers_ends_the_launcher_at_once(pid1, tmp_path):
    """Issue 43: the launcher installed its handlers only once the command ran. In a pod it is PID
    1, and the kernel drops a signal PID 1 left at its default action: a pod deleted while its task
    waited for peers (up to launcher.peerTimeoutSeconds) waited for the kubelet's SIGKILL instead."""
    argv = [sys.executable, "-c", "print('never')"]
    env = dict(TF_CONFIG=cluster("localhost", "tf-ps-0.gone.invalid"), TF_CLUSTER_PEER_TIMEOUT="120")
    if pid1:  # as in a container: PID 1 of its own PID namespace, signalled from the parent namespace
        p = start(argv, tmp_path, **env, prefix=["unshare", "--pid", "--fork", "--kill-child"])
    else:
        p = start(argv, tmp_path, **env)
    assert "TF_CONFIG: task worker:1 of a cluster of worker 2" in p.stderr.readline()
    assert "waiting for 1/2 peer(s)" in p.stderr.readline()
    target = p.pid
    if pid1:
        children = Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
        assert len(children) == 1
        target = int(children[0])
        nspid = next(
            line for line in Path(f"/proc/{target}/status").read_text().splitlines() if line.startswith("NSpid:")
        )
        assert nspid.split()[-1] == "1", nspid  # its pid in its own namespace
    t0 = time.monotonic()
    os.kill(target, signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 143, err
    assert "never" not in out
    assert "got signal 15 before the command started; exiting 143 without starting it" in err
    assert time.monotonic() - t0 < 5


def test_a_child_that_ignores_sigterm_is_killed_after_the_stop_grace(tmp_path):
    """As TensorFlow's coordination service does in multi-worker runs (seen on a real node)."""
    p = start(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, lambda *a: print('ignored', "
            "flush=True)); print('up', flush=True); time.sleep(600)",
        ],
        tmp_path,
        TF_CLUSTER_STOP_GRACE="1",
    )
    assert p.stdout.readline().strip() == "up"
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 143  # stopped, not finished: the Job retries the index
    assert "ignored" in out and "killing it" in err
    assert 1 <= time.monotonic() - t0 < 10


def test_a_killed_child_reports_128_plus_signal(tmp_path):
    p = start([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], tmp_path)
    p.communicate(timeout=30)
    assert p.returncode == 137


AS_PID_1 = pytest.param(
    True, marks=pytest.mark.needs("unshare as root", in_own_pid_namespace, "run as root with util-linux")
)


def start_as(pid1: bool, argv, tmp_path, **env):
    """The launcher as a process, or as in a container: PID 1 of its own PID namespace."""
    return start(argv, tmp_path, prefix=["unshare", "--pid", "--fork", "--kill-child"] if pid1 else (), **env)


def gone(pid: int, within: float = 5.0) -> bool:
    """The process `pid` has ended (or is a zombie nobody has reaped yet) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


def wrapped(program: str) -> list[str]:
    """`program` run by a shell that does not exec it (a `sh -c "cd ... && python train.py; ..."`
    command): the launcher's child is the shell, the program its child."""
    return ["sh", "-c", '"$0" -c "$1"; exit $?', sys.executable, program]


SAVES_ON_SIGTERM_WITH_PID = "import os, pathlib; pathlib.Path('pid').write_text(str(os.getpid()))\n" + SAVES_ON_SIGTERM
IGNORES_SIGTERM_WITH_PID = (
    "import os, pathlib, signal, time; pathlib.Path('pid').write_text(str(os.getpid()))\n"
    "signal.signal(signal.SIGTERM, lambda *a: print('ignored', flush=True))\n"
    "print('ready', flush=True); time.sleep(600)\n"
)


@pytest.mark.parametrize("pid1", [False, AS_PID_1], ids=["process", "pid-1"])
def test_a_signal_reaches_a_program_its_shell_started_and_the_task_waits_for_its_save(pid1, tmp_path):
    """A command wrapped in a shell (`sh -c "cd /code && python train.py"`: dash and bash do not
    exec a command followed by another) got no SIGTERM: the launcher signalled only the shell,
    which died at once, and then exited, so the program was killed mid-step with no checkpoint.
    The launcher signals the command's whole process group and waits for all of it."""
    p = start_as(pid1, wrapped(SAVES_ON_SIGTERM_WITH_PID), tmp_path)
    assert p.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM) if not pid1 else os.kill(launcher_pid(p), signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    saved = tmp_path / "checkpointed"
    assert saved.is_file() and saved.read_text() == "saved", err
    assert p.returncode == 143, err
    # it ended once the program had saved (0.5 s), not at the grace's end (20 s): as PID 1 the
    # launcher inherits the program when the shell dies, and reaps it
    assert time.monotonic() - t0 < 5 and "killing" not in err, err
    assert pid1 or gone(int((tmp_path / "pid").read_text()))  # (a PID namespace's pid: it ended with its PID 1)


@pytest.mark.parametrize("pid1", [False, AS_PID_1], ids=["process", "pid-1"])
def test_a_wrapped_program_that_ignores_sigterm_is_killed_after_the_stop_grace(pid1, tmp_path):
    p = start_as(pid1, wrapped(IGNORES_SIGTERM_WITH_PID), tmp_path, TF_CLUSTER_STOP_GRACE="1")
    assert p.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM) if not pid1 else os.kill(launcher_pid(p), signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 143, err
    assert "ignored" in out and "killing" in err, err
    assert 1 <= time.monotonic() - t0 < 10
    assert pid1 or gone(int((tmp_path / "pid").read_text()))


def leftover(ignores: bool) -> str:
    """A background process a command leaves; `ignores` SIGTERM (its trap set before `ready` exists)."""
    return "(trap '' TERM; touch ready; exec sleep 600)" if ignores else "(touch ready; exec sleep 600)"


AWAIT_READY = "while [ ! -e ready ]; do sleep 0.05; done;"  # the command exits once its leftover is set up


@pytest.mark.parametrize("pid1", [False, AS_PID_1], ids=["process", "pid-1"])
@pytest.mark.parametrize("ignores", [False, True], ids=["stops", "ignores-sigterm"])
def test_what_a_finished_command_left_running_is_stopped_with_the_task(pid1, ignores, tmp_path):
    """A command that exits while something it started runs on (a background process that holds
    the task's output): the launcher stops it, as the container's end would (SIGTERM, SIGKILL
    after the grace), and does not wait for it to end by itself; the command's exit code stands."""
    p = start_as(
        pid1,
        ["sh", "-c", f"{leftover(ignores)} & echo $! > pid; {AWAIT_READY} echo started; exit 3"],
        tmp_path,
        TF_CLUSTER_STOP_GRACE="1",
    )
    t0 = time.monotonic()
    out, err = p.communicate(timeout=30)
    assert p.returncode == 3, err
    assert "started" in out
    assert "stopping what the command left running in its process group" in err, err
    assert ("still runs 1.0s after SIGTERM; killing it" in err) == ignores, err
    assert time.monotonic() - t0 < 5
    assert pid1 or gone(int((tmp_path / "pid").read_text()))


def test_a_signal_after_the_command_exited_leaves_its_exit_code_alone(tmp_path):
    """SIGTERM (the pod's deletion) while the launcher stops what a finished command left: the
    command's own exit code stands (it finished), and the signal goes to what is left."""
    p = start(["sh", "-c", f"{leftover(True)} & {AWAIT_READY} echo started"], tmp_path, TF_CLUSTER_STOP_GRACE="3")
    assert p.stdout.readline().strip() == "started"
    time.sleep(1.5)  # the command has exited; its leftover ignores the SIGTERM the launcher sent it
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert "got signal 15 after the command exited" in err, err
    assert p.returncode == 0, err
    assert "command exited with 0" in err, err


def launcher_pid(p) -> int:
    """The launcher's pid under `unshare --fork` (unshare's only child)."""
    children = Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
    assert len(children) == 1
    return int(children[0])


def serve_until_the_leader_ends(tmp_path, poll: str):
    """A server task that stops with the leading Job `tf-chief`, whose condition is the returned
    file (empty: running)."""
    status = tmp_path / "leader"
    status.write_text("")
    p = start(
        [sys.executable, "-c", "import time; print('serving', flush=True); time.sleep(600)"],
        tmp_path,
        TF_CLUSTER_STOP_WITH_LEADER="true",
        TF_CLUSTER_LEADER_STATUS_FILE=str(status),
        TF_CLUSTER_POLL_SECONDS=poll,
        TF_CLUSTER_LEADER_JOB="tf-chief",
    )
    return p, status


@pytest.mark.parametrize("condition,rc", [("Complete", 0), ("Failed", 3)])
def test_stops_the_child_when_the_leading_job_finishes(condition, rc, tmp_path):
    p, status = serve_until_the_leader_ends(tmp_path, poll="0.2")
    assert p.stdout.readline().strip() == "serving"
    time.sleep(1)
    assert p.poll() is None  # still serving while the chief runs
    t0 = time.monotonic()
    status.write_text(condition)
    _, err = p.communicate(timeout=30)
    assert p.returncode == rc
    assert time.monotonic() - t0 < 5
    assert f"Job tf-chief is {condition}" in err


@pytest.mark.parametrize("condition,rc", [("Complete", 0), ("", 143)], ids=["leader-complete", "leader-running"])
def test_a_server_terminated_after_the_leader_completed_exits_0(condition, rc, tmp_path):
    """The Job controller ends a finished Job's other tasks (successPolicy) before their own poll
    saw the leader Complete: that SIGTERM is the run's end, not a failure. Mid-run it still is one."""
    p, status = serve_until_the_leader_ends(tmp_path, poll="600")  # the poll never comes first
    assert p.stdout.readline().strip() == "serving"
    status.write_text(condition)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert p.returncode == rc, err
    assert ("Job tf-chief is Complete; task stopped (exit 0)" in err) == (condition == "Complete")


@pytest.mark.parametrize("already_before_start", [True, False], ids=["finished-before-start", "finishes-during-wait"])
def test_a_replacement_started_after_the_leader_finished_exits_instead_of_waiting(already_before_start, tmp_path):
    """Found on the real node: a ParameterServer worker replaced after the chief completed waited
    for peers that were gone (the ps had stopped) instead of ending: it must exit 0 at once."""
    status = tmp_path / "leader"
    status.write_text("Complete" if already_before_start else "")
    p = start(
        [sys.executable, "-c", "print('never')"],
        tmp_path,
        TF_CLUSTER_STOP_WITH_LEADER="true",
        TF_CLUSTER_LEADER_STATUS_FILE=str(status),
        TF_CLUSTER_LEADER_JOB="tf-chief",
        TF_CONFIG=cluster("localhost", "tf-ps-0.gone.invalid"),
        TF_CLUSTER_PEER_TIMEOUT="120",
    )
    if not already_before_start:
        time.sleep(1.5)
        assert p.poll() is None  # waiting for the missing peer while the chief runs
        status.write_text("Complete")
    t0 = time.monotonic()
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0 and "never" not in out
    assert "Job tf-chief is already Complete; nothing to do" in err
    assert time.monotonic() - t0 < 10


def test_no_command_is_a_configuration_error(tmp_path):
    p = start([], tmp_path)
    _, err = p.communicate(timeout=30)
    assert p.returncode == launcher_common.EXIT_CONFIG and "no command given" in err


@pytest.mark.parametrize("condition,rc,text", [("Failed", 1, "FAIL"), ("Complete", 0, "OK")])
def test_check_mode_for_helm_test(condition, rc, text, tmp_path):
    status = tmp_path / "leader"
    status.write_text(condition)
    env = dict(os.environ, TF_CLUSTER_LEADER_STATUS_FILE=str(status), TF_CLUSTER_LEADER_JOB="tf-chief")
    proc = subprocess.run([sys.executable, str(LAUNCHER), "--check"], env=env, capture_output=True, text=True)
    assert proc.returncode == rc and proc.stdout.startswith(text)


CONDITIONS = {
    "running": ([], ""),
    "complete-1.30": ([{"type": "Complete", "status": "True"}], "Complete"),
    "complete-1.31-success-criteria-first": (
        [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}],
        "Complete",
    ),
    "failure-target-first": (
        [{"type": "FailureTarget", "status": "True"}, {"type": "Failed", "status": "True"}],
        "Failed",
    ),
    "suspended-false-complete": (
        [{"type": "Suspended", "status": "False"}, {"type": "Complete", "status": "True"}],
        "Complete",
    ),
    "false-condition-ignored": ([{"type": "Failed", "status": "False"}], ""),
}


@pytest.mark.parametrize("conditions,want", CONDITIONS.values(), ids=CONDITIONS.keys())
def test_job_conditions_are_read_by_type_not_position(conditions, want):
    assert launcher_leader.condition_of({"conditions": conditions}) == want


@pytest.mark.parametrize("intra,want", [("1", "2"), ("4", "4")])
def test_inter_op_threads_are_at_least_two(intra, want, tmp_path):
    p = start(
        [sys.executable, "-c", "import os; print(os.environ['TF_NUM_INTEROP_THREADS'])"],
        tmp_path,
        TF_NUM_INTRAOP_THREADS=intra,
    )
    out, _ = p.communicate(timeout=30)
    assert out.strip() == want


def test_run_local_maps_each_path_once(tmp_path):
    """A volume mapped into a folder under /tmp is not remapped by the pod's /tmp mount."""
    from tf_cluster.localrun.processes import localize

    addresses = {"tf-worker-0.tf:2222": "localhost:5000"}
    paths = [("/mnt/checkpoints", "/tmp/run/volumes/ckpt"), ("/tmp", "/tmp/run/pods/worker-0/tmp")]
    assert localize("/mnt/checkpoints/backup", addresses, paths) == "/tmp/run/volumes/ckpt/backup"
    assert localize("/tmp/x", addresses, paths) == "/tmp/run/pods/worker-0/tmp/x"
    assert localize('{"w":["tf-worker-0.tf:2222"]}', addresses, paths) == '{"w":["localhost:5000"]}'


def test_a_missing_tf_config_is_said_with_how_to_force_it(tmp_path):
    """A single-task release has no TF_CONFIG on purpose; a script indexing it would die with a bare KeyError."""
    p = start([sys.executable, "-c", "import os, json; json.loads(os.environ['TF_CONFIG'])"], tmp_path)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 1 and "KeyError: 'TF_CONFIG'" in err
    assert err.index("TF_CONFIG is not set") < err.index("KeyError")
    assert "tfConfig.alwaysSet=true" in err
    p = start([sys.executable, "-c", "pass"], tmp_path, TF_CONFIG=cluster("localhost"))
    assert "TF_CONFIG is not set" not in p.communicate(timeout=30)[1]


@pytest.mark.parametrize(
    "deleted,phase,want",
    [
        (None, "Running", False),  # not deleted: never fenced
        ("2026-11-25T12:00:00Z", "Running", False),  # 5 s past the deadline, within the 10 s margin
        ("2026-11-25T11:59:50Z", "Running", True),  # 15 s past it: no kubelet ended it
        ("2026-11-25T11:59:50Z", "Pending", True),
        ("2026-11-25T11:59:50Z", "Failed", False),  # already finished: nothing to do
        ("2026-11-25T11:59:50Z", "Succeeded", False),
    ],
)
def test_a_pod_is_stranded_when_no_kubelet_ended_it_past_its_deletion_deadline(deleted, phase, want):
    now = launcher_leader.parse_time("2026-11-25T12:00:05Z")
    pod = {"metadata": {"name": "p", **({"deletionTimestamp": deleted} if deleted else {})}, "status": {"phase": phase}}
    assert launcher_fencing.stranded(pod, now, after=10) is want


def tf_config(**roles: int) -> str:
    return json.dumps(
        {"cluster": {r: [f"r-{r}-0a1b2c-{i}.r:2222" for i in range(n)] for r, n in roles.items()}, "task": {}}
    )


def host(role: str, i: int) -> str:
    return f"r-{role}-0a1b2c-{i}.r"


@pytest.mark.parametrize(
    "strategy,roles,role,want",
    [
        # MultiWorkerMirrored: the coordination service's leader only (the chief, else worker 0),
        # itself included (its agent connects to its own service by name)
        ("multiWorkerMirrored", {"worker": 3}, "worker", [host("worker", 0)]),
        ("multiWorkerMirrored", {"chief": 1, "worker": 2}, "worker", [host("chief", 0)]),
        ("multiWorkerMirrored", {"chief": 1, "worker": 2}, "chief", [host("chief", 0)]),
        ("multiWorkerMirrored", {"worker": 2}, "evaluator", []),  # not in the cluster: reads checkpoints
        # ParameterServer: the coordinator connects to every task; the servers to nobody at start
        (
            "parameterServer",
            {"chief": 1, "worker": 2, "ps": 1},
            "chief",
            [host("chief", 0), host("ps", 0), host("worker", 0), host("worker", 1)],
        ),
        ("parameterServer", {"chief": 1, "worker": 2, "ps": 1}, "worker", []),
        ("parameterServer", {"chief": 1, "worker": 2, "ps": 1}, "ps", []),
        ("parameterServer", {"chief": 1, "worker": 2, "ps": 1}, "evaluator", []),
        # custom: nothing known of its program, every host
        ("custom", {"worker": 2, "ps": 1}, "worker", [host("ps", 0), host("worker", 0), host("worker", 1)]),
    ],
)
def test_a_task_waits_only_for_the_peers_its_tensorflow_contacts_at_start(strategy, roles, role, want):
    assert launcher_tfconfig.peers_needed(tf_config(**roles), strategy, role) == want


@pytest.mark.parametrize(
    "roles,fencers",
    [
        # the first two of the leading role and the first of each other role (and, when they share a
        # node, a task on another: test_fencers_on_one_node_ask_the_first_task_on_another_node)
        ({"worker": 4}, {("worker", 0), ("worker", 1)}),
        ({"chief": 1, "worker": 3}, {("chief", 0), ("worker", 0)}),
        ({"chief": 1, "worker": 3, "ps": 2}, {("chief", 0), ("worker", 0), ("ps", 0)}),
    ],
)
def test_a_few_tasks_fence_not_every_task(roles, fencers):
    config = tf_config(**roles)
    every = {(r, i) for r, n in roles.items() for i in range(n)} | {("evaluator", 0)}
    assert {(r, i) for r, i in every if launcher_fencing.fences(config, r, i)} == fencers


def running_on(node, hostname, asked=False, ready=True, phase="Running"):
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if asked:
        conditions.append({"type": launcher_fencing.DEPUTY, "status": "True", "message": "every fencer on n1"})
    return {
        "metadata": {"name": hostname + "-p"},
        "spec": {"hostname": hostname, "subdomain": "r", "nodeName": node},
        "status": {"phase": phase, "conditions": conditions},
    }


@pytest.mark.parametrize(
    "placed,want",
    [
        # the fencers (chief 0, worker 0) on n1: the first task of TF_CONFIG elsewhere
        ({"chief-0": "n1", "worker-0": "n1", "worker-1": "n1", "worker-2": "n2", "worker-3": "n2"}, ("worker-2", "n1")),
        # already on two nodes
        ({"chief-0": "n1", "worker-0": "n2", "worker-1": "n1", "worker-2": "n1", "worker-3": "n1"}, None),
        # every task on one node: nobody to ask
        ({"chief-0": "n1", "worker-0": "n1", "worker-1": "n1", "worker-2": "n1", "worker-3": "n1"}, None),
        # n1 lost (its pods not Ready): worker 2, asked before, fences alone on n2: ask one on n3
        (
            {"chief-0": "n1!", "worker-0": "n1!", "worker-1": "n2", "worker-2": "n2*", "worker-3": "n3"},
            ("worker-3", "n2"),
        ),
        # asked on an earlier pod of its task (worker 2's first, Failed): its new pod fences too
        ({"chief-0": "n1", "worker-0": "n1", "worker-1": "n1", "worker-2": "n2", "old worker-2": "n2*"}, None),
    ],
    ids=["on-one-node", "spread", "single-node", "after-a-loss", "asked-before"],
)
def test_fencers_on_one_node_ask_the_first_task_on_another_node(placed, want):
    """Issue 43: the fencers, chosen by index, may all sit on one node (the chart spreads nothing by
    default); losing it left nobody to fence, and the release hung. `!`: not Ready, `*`: asked."""
    cluster = {"chief": ["r-chief-0.r:2222"], "worker": [f"r-worker-{i}.r:2222" for i in range(4)]}
    pods = []
    for task, where in placed.items():
        p = running_on(where.strip("!*"), "r-" + task.split()[-1], asked="*" in where, ready="!" not in where)
        if task.startswith("old "):
            p["metadata"]["name"], p["status"]["phase"] = p["metadata"]["name"] + "-old", "Failed"
        pods.append(p)
    got = launcher_fencing.deputy_wanted(pods, launcher_fencing.tasks_by_host(cluster))
    assert (got and (got[0]["spec"]["hostname"], got[1])) == (want and ("r-" + want[0], want[1]))


def pod(hostname, ip=None, deleted=False, scheduled=None, node=None):
    return {
        "metadata": {"name": hostname + "-xyz", **({"deletionTimestamp": "2026-11-25T12:00:00Z"} if deleted else {})},
        "spec": {"hostname": hostname, "subdomain": "r", **({"nodeName": node} if node else {})},
        "status": {
            **({"podIP": ip} if ip else {}),
            "conditions": [{"type": "PodScheduled", "status": "False", "message": scheduled}] if scheduled else [],
        },
    }


@pytest.mark.parametrize(
    "pods,published,why",
    [
        ([], False, "no pod yet"),
        (
            [pod("r-worker-0a1b2c-0", scheduled="0/3 nodes are available: 3 Insufficient cpu.")],
            False,
            "not scheduled: 0/3 nodes are available: 3 Insufficient cpu.",
        ),
        ([pod("r-worker-0a1b2c-0", node="n1")], False, "on node n1, no IP yet"),
        ([pod("r-worker-0a1b2c-0", ip="10.0.0.5", deleted=True)], False, "its pod is being deleted"),
        ([pod("r-worker-0a1b2c-1", ip="10.0.0.6")], False, "no pod yet"),  # another index
        ([pod("r-worker-0a1b2c-0", ip="10.0.0.5")], True, None),
    ],
)
def test_a_peer_is_published_once_its_live_pod_has_an_ip(pods, published, why):
    for name in (host("worker", 0), host("worker", 0) + ".ns.svc.cluster.local"):
        assert launcher_peerpods.published(name, pods) is published
        if why:
            assert launcher_peerpods.why_missing(name, pods) == why


def test_one_peer_is_watched_by_its_job_and_index_more_by_the_release(monkeypatch):
    monkeypatch.setenv("TF_CLUSTER_RELEASE_SELECTOR", "app.kubernetes.io/instance=r")
    assert launcher_peerpods.peer_selector([host("worker", 0)]) == (
        "batch.kubernetes.io/job-name=r-worker-0a1b2c,batch.kubernetes.io/job-completion-index=0"
    )
    assert launcher_peerpods.peer_selector([host("worker", 0), host("ps", 0)]) == "app.kubernetes.io/instance=r"


def test_the_resolvers_servers_search_domains_and_ndots_are_read_as_glibc_reads_them(tmp_path):
    conf = tmp_path / "resolv.conf"
    conf.write_text(
        "# kubelet\nsearch ns.svc.cluster.local svc.cluster.local cluster.local\n"
        "nameserver 10.96.0.10\noptions ndots:5 timeout:2\n"
    )
    assert launcher_dns.resolv_conf(str(conf)) == (
        ["10.96.0.10"],
        ["ns.svc.cluster.local", "svc.cluster.local", "cluster.local"],
        5,
    )
    assert launcher_dns.resolv_conf(str(tmp_path / "absent")) == ([], [], 1)


def test_several_peers_are_learnt_from_their_services_endpointslices_as_coredns_serves_them():
    def piece(*endpoints, service="r"):
        return {"metadata": {"labels": {"kubernetes.io/service-name": service}}, "endpoints": list(endpoints)}

    slices = [
        piece(
            {"hostname": "r-worker-0a1b2c-0", "addresses": ["10.0.0.5"], "conditions": {"ready": True}},
            {"hostname": "r-worker-0a1b2c-1", "addresses": ["10.0.0.6"], "conditions": {"ready": False}},
            {"hostname": "r-worker-0a1b2c-2", "addresses": [], "conditions": {"ready": True}},
            {"addresses": ["10.0.0.8"], "conditions": {"ready": True}},  # no hostname: no per-task name
        ),
        piece({"hostname": "r-ps-0a1b2c-0", "addresses": ["10.0.0.7"]}),  # ready unset: served
        piece({"hostname": "r-worker-0a1b2c-3", "addresses": ["10.0.0.9"]}, service="other"),
    ]
    want = {"r-worker-0a1b2c-0.r", "r-ps-0a1b2c-0.r", "r-worker-0a1b2c-3.other"}
    assert launcher_peerpods.endpoint_keys(slices) == want
    assert launcher_peerpods.host_key(host("worker", 0) + ".ns.svc.cluster.local") == host("worker", 0)
    assert launcher_peerpods.peer_service([host("worker", 0), host("ps", 0)]) == "r"
    assert launcher_peerpods.peer_service([host("worker", 0), "x-0.other"]) is None  # two Services: the release's pods
    assert launcher_peerpods.peer_service(["localhost", host("ps", 0)]) is None


def test_the_coordinator_restarts_only_for_lost_peers_in_its_tf_config():
    """Issue 43: the ParameterServer coordinator restarted (exit 6) for any pod of the release lost
    with its node, its evaluator's or TensorBoard's too, which are not its peers."""
    hosts = ["r-chief-0.r.ns.svc.cluster.local", "r-worker-0.r.ns.svc", "r-ps-0.r"]
    lost = dict(status={"reason": "NodeLost"})
    worker, evaluator, ps = pod("r-worker-0"), pod("r-evaluator-0"), pod("r-ps-0")
    worker["status"].update(lost["status"])
    evaluator["status"].update(lost["status"])
    assert launcher_fencing.lost_peers([worker, evaluator, ps], set(), hosts) == {"r-worker-0-xyz"}
    assert launcher_fencing.lost_peers([evaluator, ps], {"r-ps-0-xyz", "r-evaluator-0-xyz"}, hosts) == {"r-ps-0-xyz"}
    assert launcher_fencing.lost_peers([evaluator], set(), hosts) == set()


@pytest.mark.parametrize(
    "current,deleted,absent_for,want",
    [
        ([{"status": {}}], {}, None, ""),
        ([{"status": {"conditions": [{"type": "Complete", "status": "True"}]}}], {}, None, "Complete"),
        # deleted right after it finished: its last state (the DELETED event's object) says how
        ([], {"j": {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}}, 0.0, "Failed"),
        ([], {"j": {"status": {}}}, 5.0, ""),  # deleted unfinished: it may come back (Argo CD self-heal)
        ([], {"j": {"status": {}}}, 60.0, "Gone"),
        ([], {}, 60.0, "Gone"),  # never there
        ([{"status": {}}], {"j": {"status": {}}}, None, ""),  # deleted and made again: the new one runs
    ],
    ids=["running", "complete", "finished-then-deleted", "deleted-5s", "deleted-60s", "never-there", "recreated"],
)
def test_a_follower_reads_its_leaders_end_from_every_event_and_its_absence(current, deleted, absent_for, want):
    """Issue 43: a DELETED event's Job was dropped unread, and a leading Job that no longer existed
    left its followers waiting forever."""
    assert launcher_leader.LEADER_MISSING_SECONDS == 60  # the default (no TF_CLUSTER_LEADER_MISSING_SECONDS here)
    assert launcher_leader.leader_outcome(current, deleted, absent_for) == want


def test_the_fence_reads_the_api_servers_clock_not_this_nodes():
    """Issue 43: the fence compared this node's clock with the API server's deletion deadline: a
    node 30 s ahead fenced a pod that was still within its grace on the server's clock."""
    local = launcher_leader.parse_time("2026-11-25T12:00:35Z")  # this node's clock: 30 s ahead of the server's
    offset = launcher_informer.server_offset("Wed, 25 Nov 2026 12:00:05 GMT", local)
    assert offset == -30.0
    assert launcher_informer.server_offset(None, local) is None
    assert launcher_informer.server_offset("yesterday", local) is None
    deleted = pod("r-worker-0", ip="10.0.0.5")
    deleted["metadata"]["deletionTimestamp"] = "2026-11-25T12:00:00Z"
    deleted["status"]["phase"] = "Running"
    assert launcher_fencing.stranded(deleted, local, 10)  # on this node's clock: 35 s past the deadline
    assert not launcher_fencing.stranded(deleted, local + offset, 10)  # on the server's: 5 s, within the margin


def mwms(role, index, chief=False):
    cluster = {"worker": ["r-worker-0.r:2222", "r-worker-1.r:2222", "r-worker-2.r:2222"]}
    if chief:
        cluster["chief"] = ["r-chief-0.r:2222"]
    return json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})


def test_under_multiworkermirrored_every_task_but_the_leader_watches_the_leaders_name():
    watch = launcher_incarnation.hosts_to_watch
    assert watch(mwms("worker", 1), "multiWorkerMirrored", "worker", 1) == ["r-worker-0.r"]
    assert watch(mwms("worker", 0), "multiWorkerMirrored", "worker", 0) == []
    with_chief = mwms("worker", 0, chief=True)
    assert watch(with_chief, "multiWorkerMirrored", "worker", 0) == ["r-chief-0.r"]
    assert watch(with_chief, "multiWorkerMirrored", "chief", 0) == []
    assert watch(with_chief, "multiWorkerMirrored", "evaluator", 0) == []
    assert watch("", "multiWorkerMirrored", "worker", 0) == []


def ps_cluster(role, index):
    cluster = {
        "chief": ["r-chief-0.r:2222"],
        "worker": ["r-worker-0.r:2222", "r-worker-1.r:2222"],
        "ps": ["r-ps-0.r:2222", "r-ps-1.r:2222"],
        "evaluator": ["r-evaluator-0.r:2222"],
    }
    return json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})


def test_under_parameterserver_a_worker_watches_every_ps_name_and_no_other_task_does():
    """Issue 43, a ps's node lost: the worker's channel to the old ps stayed ESTABLISHED on the
    vanished machine and the restarted coordinator made no step for 5+ minutes (the harness's
    chief + ps node killed, on the launcher before this change). A worker restarts when a ps is
    replaced; the coordinator restarts by the fence's word (a lost peer), the ps and evaluator
    call no one."""
    watch = launcher_incarnation.hosts_to_watch
    assert watch(ps_cluster("worker", 1), "parameterServer", "worker", 1) == ["r-ps-0.r", "r-ps-1.r"]
    for role in ("chief", "ps", "evaluator"):
        assert watch(ps_cluster(role, 0), "parameterServer", role, 0) == [], role
    assert watch(ps_cluster("worker", 0), "custom", "worker", 0) == []


def test_a_new_address_of_the_leaders_name_is_a_new_incarnation_and_a_missing_one_is_not():
    """Issue 43, a lost leader: survivors of a MultiWorkerMirrored run whose leader's node was lost
    waited on it forever (850 s without a step on the harness). The leader's name answering with a
    new address (its replacement's pod), while the task holds a connection to the old one, is what
    restarts them; a name that stops resolving (the leader finished, or is between pods) or adds an
    address is not."""
    seen = []

    def watch(answers):  # the program holds a connection to every old address; what was not read
        rest = iter(answers)
        resolve = lambda h: frozenset(next(rest))  # noqa: E731
        launcher_incarnation.watch_incarnation(
            "r-worker-0.r",
            threading.Event(),
            lambda *a: seen.append(a),
            every=0.001,
            resolve=resolve,
            attached=lambda old: True,
        )
        return rest

    rest = watch([{"10.0.0.5"}, set(), {"10.0.0.5"}, {"10.0.0.5", "10.0.1.7"}, set(), {"10.0.1.7"}, {"10.0.2.9"}])
    assert seen == [("r-worker-0.r", ["10.0.0.5"], ["10.0.1.7"])]
    assert next(rest) == {"10.0.2.9"}, "it stops watching once it said so"
    # a name that did not resolve when the program started: its first address is the baseline
    watch([set(), {"10.0.0.5"}, {"10.0.0.5"}, {"10.0.3.3"}])
    assert seen[-1] == ("r-worker-0.r", ["10.0.0.5"], ["10.0.3.3"])


@pytest.mark.parametrize(
    "answers,families",
    [
        ([["10.0.0.5"], ["10.0.0.5"], ["10.0.0.6"]], ["unspec", "inet", "inet"]),
        ([[], ["fd00::5"], ["fd00::5"]], ["unspec", "unspec", "inet6"]),
        ([["10.0.0.5", "fd00::5"], ["10.0.0.5", "fd00::5"]], ["unspec", "unspec"]),
        ([["10.0.0.5"], [], [], [], ["fd00::5"], ["fd00::5"]], ["unspec", "inet", "inet", "inet", "unspec", "inet6"]),
    ],
    ids=["ipv4", "ipv6-after-no-answer", "dual-stack", "both-again-after-3-empty"],
)
def test_the_leaders_name_is_asked_for_one_family_once_its_first_answer_shows_it(answers, families):
    """Every chief and worker but the leader looks the leader's name up every 10 s: A and AAAA
    each time was two queries a look to CoreDNS (about 12 a task a minute, measured at 512 tasks).
    Once the name answers with one family, the launcher asks for that family alone."""
    import socket

    names = {socket.AF_UNSPEC: "unspec", socket.AF_INET: "inet", socket.AF_INET6: "inet6"}
    asked, given = [], iter(answers)

    def look(host: str, family: int) -> frozenset[str]:
        asked.append(names[family])
        return frozenset(next(given))

    resolve = launcher_incarnation.one_family_resolver(look)
    for want in answers:
        assert resolve("tf-chief-0.tf") == frozenset(want)
    assert asked == families


def test_the_incarnation_watch_asks_for_one_family_by_default(monkeypatch):
    import socket

    asked: list[int] = []
    stop = threading.Event()

    def addresses(host: str, family: int = socket.AF_UNSPEC) -> frozenset[str]:
        asked.append(family)
        if len(asked) == 4:
            stop.set()  # four looks, however slow the machine
        return frozenset({"10.0.0.5"})

    monkeypatch.setattr(launcher_incarnation, "addresses", addresses)
    launcher_incarnation.watch_incarnation(
        "tf-chief-0.tf", stop, lambda *a: None, every=0.05, attached=lambda old: True
    )
    assert asked == [socket.AF_UNSPEC] + [socket.AF_INET] * 3, asked


def test_a_task_that_never_reached_the_old_leader_takes_the_new_one_as_its_baseline():
    """The flake of 382c63b's CI (test_an_evicted_mwms_worker_costs_no_step): worker 1's next pod
    started while worker 0 (the leader) was exiting 42, read its old address, and was restarted
    when the new leader showed, which failed the new leader's first try. A task that holds no
    connection to the old address never joined it: the new address becomes its baseline, and
    only a later replacement of an incarnation it holds restarts it."""
    answers = iter([{"10.0.0.5"}, {"10.0.1.7"}, {"10.0.1.7"}, {"10.0.2.9"}, {"10.0.3.1"}])
    held = {"10.0.1.7"}  # it reached the new leader, never the old one
    replaced, moved = [], []
    launcher_incarnation.watch_incarnation(
        "r-worker-0.r",
        threading.Event(),
        lambda *a: replaced.append(a),
        every=0.001,
        resolve=lambda h: frozenset(next(answers)),
        attached=lambda old: not held.isdisjoint(old),
        on_moved=lambda *a: moved.append(a),
    )
    assert moved == [("r-worker-0.r", ["10.0.0.5"], ["10.0.1.7"])]
    assert replaced == [("r-worker-0.r", ["10.0.1.7"], ["10.0.2.9"])]
    assert next(answers) == {"10.0.3.1"}, "it stops watching once it said so"


def test_the_connections_this_pod_holds_are_read_from_the_kernel(tmp_path):
    """held_by_this_pod reads the pod's TCP tables: a real connection shows with its peer's
    address, an IPv4-mapped IPv6 one as IPv4, and a listener or a closing socket does not."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    try:
        assert "127.0.0.1" in launcher_incarnation.established_peers()
        assert launcher_incarnation.held_by_this_pod(["127.0.0.1", "10.9.9.9"])
    finally:
        for s in (client, conn, server):
            s.close()
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    v4 = tmp_path / "tcp"
    v4.write_text(
        header
        + "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n"
        + "   1: 0500000A:C350 0700010A:08AE 01 00000000:00000000 00:00000000 00000000     0        0 2\n"
        + "   2: 0500000A:C351 0900020A:08AE 08 00000000:00000000 00:00000000 00000000     0        0 3\n"
    )
    v6 = tmp_path / "tcp6"
    v6.write_text(
        header
        + "   0: 0000000000000000FFFF00000500000A:C352 0000000000000000FFFF00000300030A:08AE 01 "
        + "00000000:00000000 00:00000000 00000000     0        0 4\n"
    )
    # 10.1.0.7 ESTABLISHED, 10.2.0.9 CLOSE_WAIT (its peer closed: an ended process, not a vanished
    # machine), 10.3.0.3 ESTABLISHED through an IPv6 socket; little-endian words, as on x86 and arm64
    assert launcher_incarnation.established_peers((str(v4), str(v6))) == {"10.1.0.7", "10.3.0.3"}
    assert launcher_incarnation.established_peers((str(tmp_path / "none"),)) is None


def watching_peers(monkeypatch, strategy: str, tf_config: str, role: str, index: int) -> None:
    """A task's environment for the launcher's peer watch (hosts_to_watch), looked up every 0.05 s,
    without an agent or a wait for its peers."""
    monkeypatch.setenv("TF_CLUSTER_STRATEGY", strategy)
    monkeypatch.setenv("TF_CLUSTER_ROLE", role)
    monkeypatch.setenv("TF_TASK_INDEX", str(index))
    monkeypatch.setenv("TF_CONFIG", tf_config)
    monkeypatch.setenv("TF_CLUSTER_WAIT_FOR_PEERS", "false")
    monkeypatch.setenv("TF_CLUSTER_INCARNATION_SECONDS", "0.05")
    monkeypatch.delenv("TF_CLUSTER_AGENT_DIR", raising=False)


def test_a_task_whose_leader_was_replaced_stops_its_program_and_exits_6(tmp_path, monkeypatch):
    """The launcher's side of it, around a real child: the child stopped within the grace, exit 6
    (its Job retries it without counting: tests/chart), the log says why."""
    watching_peers(monkeypatch, "multiWorkerMirrored", mwms("worker", 1), "worker", 1)
    answers = iter([{"10.0.0.5"}] * 5 + [{"10.0.1.7"}] * 1000)
    monkeypatch.setattr(launcher_incarnation, "addresses", lambda h, family=0: frozenset(next(answers)))
    monkeypatch.setattr(launcher_incarnation, "established_peers", lambda: frozenset({"10.0.0.5"}))
    run = launcher_task.TaskRun(
        [sys.executable, "-c", "import time; time.sleep(60)"], {}, {"proc": None, "starting": False}, 5.0, None, None
    )
    t0 = time.monotonic()
    assert run.run() == launcher_common.EXIT_PEER_LOST == 6
    assert time.monotonic() - t0 < 10


def test_a_task_started_as_its_leader_ended_is_not_restarted_when_the_new_one_shows(monkeypatch, capsys):
    """The launcher's side of the baseline rule, around a real child: the leader's name moves while
    the task holds no connection to the old address; the program runs to its own end (exit 0),
    and the log says why nothing was restarted."""
    watching_peers(monkeypatch, "multiWorkerMirrored", mwms("worker", 1), "worker", 1)
    answers = iter([{"10.0.0.5"}] * 3 + [{"10.0.1.7"}] * 1000)
    monkeypatch.setattr(launcher_incarnation, "addresses", lambda h, family=0: frozenset(next(answers)))
    monkeypatch.setattr(launcher_incarnation, "established_peers", lambda: frozenset({"10.0.1.7"}))
    run = launcher_task.TaskRun(
        [sys.executable, "-c", "import time; time.sleep(1.5)"], {}, {"proc": None, "starting": False}, 5.0, None, None
    )
    assert run.run() == 0
    said = capsys.readouterr()
    assert "r-worker-0.r now answers at 10.0.1.7 (was 10.0.0.5)" in said.out + said.err
    assert "no restart" in said.out + said.err


def test_a_parameterserver_worker_whose_ps_was_replaced_stops_its_server_and_exits_6(monkeypatch, capsys):
    """The same around a real child for a ParameterServer worker: ps 1's name answers with a new
    address (ps 0's does not change): the server is stopped, exit 6 (its Job retries it without
    counting: tests/chart), and the log names the ps."""
    watching_peers(monkeypatch, "parameterServer", ps_cluster("worker", 0), "worker", 0)
    looked = {"r-ps-1.r": 0}

    def resolve(host, family=0):
        if host == "r-ps-0.r":
            return frozenset({"10.0.0.5"})
        looked[host] += 1
        return frozenset({"10.0.0.6"} if looked[host] < 5 else {"10.0.1.9"})

    monkeypatch.setattr(launcher_incarnation, "addresses", resolve)
    monkeypatch.setattr(launcher_incarnation, "established_peers", lambda: frozenset({"10.0.0.5", "10.0.0.6"}))
    run = launcher_task.TaskRun(
        [sys.executable, "-c", "import time; time.sleep(60)"], {}, {"proc": None, "starting": False}, 5.0, None, None
    )
    t0 = time.monotonic()
    assert run.run() == launcher_common.EXIT_PEER_LOST == 6
    assert time.monotonic() - t0 < 10
    said = capsys.readouterr()
    assert "the ps r-ps-1.r was replaced (now 10.0.1.9, was 10.0.0.6)" in said.out + said.err


@pytest.mark.parametrize("restarts,want", [("true", 1), ("false", 6)])
def test_a_commands_own_exit_6_counts_where_its_job_would_retry_6_for_free(tmp_path, restarts, want):
    """Exit 6 is the launcher's restart, retried without counting: a program that exits 6 by
    itself, under that rule, would be retried forever. The launcher reports it as 1 there, and
    leaves it as it is where the Job counts 6. The chart says which (TF_CLUSTER_RESTARTS, from the
    rule its podFailurePolicy uses: tests/chart/test_lifecycle_security.py)."""
    p = start(
        [sys.executable, "-c", "import sys; sys.exit(6)"],
        tmp_path,
        TF_CLUSTER_RESTARTS=restarts,
        TF_CLUSTER_WAIT_FOR_PEERS="false",
    )
    _, err = p.communicate(timeout=30)
    assert p.returncode == want, err
    if want == 1:
        assert "command exited with 6, the code this launcher keeps for its restart" in err, err


@pytest.mark.parametrize(
    "ready,since,want",
    [
        ("True", None, False),  # its node still reports it Ready: a live kubelet, not a lost node
        ("False", "2026-11-25T11:58:00Z", False),  # not Ready 125 s: within the self-fence's 240 + 10
        ("False", "2026-11-25T11:55:50Z", True),  # 255 s: a cut-off task has stopped its program
        (None, None, False),  # no Ready condition: nothing says its node went away
    ],
)
def test_the_fence_waits_out_the_self_fence_on_the_pods_not_ready_time(ready, since, want):
    """Issue 43, split brain: the fence replaced a pod whose node was cut off from the control plane
    alone while its task still trained. With the self-fence on (240 s), the fence also waits until
    the pod has been not Ready for the bound plus its margin, on the API server's clock."""
    now = launcher_leader.parse_time("2026-11-25T12:00:05Z")
    conditions = [{"type": "Ready", "status": ready, "lastTransitionTime": since}] if ready else []
    pod = {
        "metadata": {"name": "p", "deletionTimestamp": "2026-11-25T11:59:50Z"},
        "status": {"phase": "Running", "conditions": conditions},
    }
    assert launcher_fencing.stranded(pod, now, after=10, self_fence=240) is want
    assert launcher_fencing.stranded(pod, now, after=10), "without the self-fence: past the deadline is enough"


def test_a_task_stops_its_program_when_it_cannot_hear_the_api_server_or_its_pod_failed():
    running = {"status": {"phase": "Running"}}
    assert launcher_selffence.stop_reason(running, 239.0, 240) is None
    why = launcher_selffence.stop_reason(running, 240.0, 240)
    assert why and "no answer from the API server for 240s" in why and "nodeLoss.selfFenceSeconds" in why
    assert launcher_selffence.stop_reason(None, 10.0, 240) is None  # not seen yet: only the silence counts
    fenced = {"status": {"phase": "Failed", "reason": "NodeLost"}}
    assert "marked Failed (NodeLost)" in launcher_selffence.stop_reason(fenced, 0.0, 240)
    # a kubelet that stopped reporting while this agent still hears the API server: the pod
    # deleted (evicted) and not Ready; it stops before the fence's bound, by the stop's margin
    not_ready = {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-25T12:00:00Z"}
    evicted = {
        "metadata": {"deletionTimestamp": "2026-11-25T12:01:00Z"},
        "status": {"phase": "Running", "conditions": [not_ready]},
    }
    t0 = launcher_leader.parse_time("2026-11-25T12:00:00Z")
    assert launcher_selffence.stop_reason(evicted, 1.0, 240, t0 + 209, margin=30) is None
    why = launcher_selffence.stop_reason(evicted, 1.0, 240, t0 + 210, margin=30)
    assert why and "deleted and has been not Ready for 210s" in why, why
    # not Ready while it starts (an init container installing packages), not deleted, its agent's
    # requests answered (it asks every quarter of the bound while not Ready): no reason
    starting = {"metadata": {}, "status": {"phase": "Pending", "conditions": [not_ready]}}
    assert launcher_selffence.stop_reason(starting, 1.0, 240, t0 + 1000, margin=30, answer_age=10) is None
    # not Ready, not deleted, and no answer for a quarter of the bound and more: the fence's clock
    # started when the pod turned not Ready (a kubelet that failed before its node was cut off)
    running_not_ready = {"metadata": {}, "status": {"phase": "Running", "conditions": [not_ready]}}
    assert launcher_selffence.stop_reason(running_not_ready, 1.0, 240, t0 + 209, margin=30, answer_age=200) is None
    assert launcher_selffence.stop_reason(running_not_ready, 1.0, 240, t0 + 210, margin=30, answer_age=74) is None
    why = launcher_selffence.stop_reason(running_not_ready, 1.0, 240, t0 + 210, margin=30, answer_age=75)
    assert why and "not Ready for 210s and the API server has not answered for 75s" in why, why
    # its pod gone from the API (force-deleted while its node was cut off): its Job replaces it at once
    why = launcher_selffence.stop_reason(None, 1.0, 240, gone=True)
    assert why and "gone from the API server" in why, why


def test_a_watch_line_counts_as_heard_only_while_it_shows_the_pod_ready_and_the_stops_time_earlier():
    """Issue 46, the steady cost: a line of the agent's watch (an event, or the bookmark the API
    server sends about every minute) proves the server heard this node when it shows the pod
    Ready, counted `margin` (the stop's time) earlier; an answer to a request counts as itself."""
    unheard = launcher_selffence.unheard_for
    assert unheard(100, None, None, since=10, margin=25) == 90  # nothing heard yet: since the start
    assert unheard(100, 40, None, since=0, margin=25) == 60  # only a request's answer
    assert unheard(100, 40, 90, since=0, margin=25) == 35  # a bookmark 10 s ago, 25 s earlier
    assert unheard(100, 95, 90, since=0, margin=25) == 5  # the answer is the more recent proof
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert launcher_fencing.is_ready(ready)
    for pod in (None, {"status": {}}, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}):
        assert not launcher_fencing.is_ready(pod)


def test_asking_for_answers_ends_a_watch_that_would_outlast_the_ask_at_every_check():
    """The self-fence asks at each check: the open watch ends when it first asks (an answer at
    once), and a watch that opened as it asked (and so took its long length) is ended at the next
    check, not left to run its 10-20 minutes unanswered."""
    inf = launcher_informer.Informer("/api/v1/namespaces/ns/pods", name="t")
    renewed = []
    inf.renew = lambda: renewed.append(round(inf._watch_ends - time.monotonic()))
    inf.ask_answers(60)  # no watch open yet: nothing to end
    inf._watch_ends = time.monotonic() + 900  # a long watch, opened as the ask came
    inf.ask_answers(60)  # ended
    inf._watch_ends = time.monotonic() + 60  # its successor, within the ask
    inf.ask_answers(60)
    inf.ask_answers(None)  # not asking: a watch runs its length
    inf._watch_ends = time.monotonic() + 30
    inf.ask_answers(60)  # first asked again: ended at once
    assert renewed == [900, 30]
    assert inf.answer_within == 60


@pytest.mark.parametrize(
    "rv,than,want",
    [
        ("12", None, True),
        ("12", "11", True),
        ("12", "12", False),
        ("9", "12", False),
        (None, "1", False),
        ("b", "a", True),
    ],
)
def test_a_watch_line_is_news_only_with_a_newer_resource_version(rv, than, want):
    """A stale API server (cut from its storage) repeats its last bookmark: no proof of being heard."""
    assert launcher_informer.newer(rv, than) is want


@pytest.mark.parametrize(
    "cluster,notebook,want",
    [
        ({"chief": ["c"], "worker": ["w0", "w1"]}, False, ("chief", 0)),
        ({"chief": ["nb"], "worker": ["w0"], "ps": ["p0"]}, True, ("worker", 0)),  # the chief is the notebook
        ({"worker": ["w0"]}, False, ("worker", 0)),
        ({"chief": ["nb"], "ps": ["p0"]}, True, ("ps", 0)),
    ],
)
def test_the_pulse_is_written_by_the_first_task_with_an_agent(cluster, notebook, want):
    assert launcher_selffence.pulse_writer(cluster, notebook) == want
    role, index = want
    assert launcher_fencing.is_fencer(cluster, role, index), "the pulse writer has the fence's pods/status patch"


class _TaskPods:
    """What self_fence_loop reads of its informer (selffence.task_pods), driven by the test: the
    pod as the watch shows it, when its last line came, and the round trips the loop asks for."""

    def __init__(self, pod):
        self.pod, self.streamed_at, self.forbidden, self.clock_offset = pod, None, None, None
        self.asked = []

    def snapshot(self):
        return [self.pod]

    def ask_answers(self, within):
        if not self.asked or self.asked[-1] != within:
            self.asked.append(within)


@pytest.mark.parametrize(
    "case",
    [
        "healthy",  # Ready, a line every 0.3 s, no request answered: no stop, no round trip asked
        "one-way cut",  # the stream flows, the pod turns not Ready, requests go unanswered: stop
        "stream stopped",  # Ready, then no line and no answer (a whole cut): stop
        "not ready but answered",  # not Ready (its program's own doing), requests answered: no stop
    ],
)
def test_the_self_fence_asks_for_round_trips_only_when_its_watch_cannot_prove_it_is_heard(case, monkeypatch, capfd):
    """Issue 46: with the pod Ready and its watch bringing lines, the agent sends no request but its
    watch's own renewal; a cut still stops the program, within the bound of its last proof less
    the stop's margin, so before the fence (which counts from the pod's turn to not Ready)."""
    bound, every, grace, lag = 2.0, 0.05, 0.2, 0.3
    monkeypatch.setattr(launcher_selffence, "LINE_LAG_S", lag)  # the module's seconds, scaled as the bound is
    monkeypatch.setattr(launcher_selffence, "ASK_BEFORE_S", 0.5)
    monkeypatch.setenv("TF_CLUSTER_POD_NAME", "p")
    monkeypatch.setenv("TF_CLUSTER_STOP_GRACE", str(grace))
    monkeypatch.setattr(launcher_kubeapi, "ANSWERED", {})
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-25T12:00:00Z"}
    pods = _TaskPods({"metadata": {"name": "p"}, "status": {"phase": "Running", "conditions": [ready]}})
    told, told_at, stop = [], [], threading.Event()
    on_stop = lambda why: (told_at.append(time.monotonic()), told.append(why))  # noqa: E731
    t = threading.Thread(target=launcher_selffence.self_fence_loop, args=(stop, bound, on_stop, pods, every))
    t0 = time.monotonic()
    t.start()
    last_proof = t0
    try:
        while time.monotonic() - t0 < 4 and not told:
            now = time.monotonic()
            if (
                case == "healthy"
                or (case == "one-way cut" and now - t0 < 1)
                or (case == "stream stopped" and now - t0 < 0.5)
            ):
                pods.streamed_at = last_proof = now
            elif case == "one-way cut":
                pods.pod = {
                    "metadata": {"name": "p"},
                    "status": {"phase": "Running", "conditions": [dict(ready, status="False")]},
                }
                pods.streamed_at = now  # still flowing, one way
            elif case == "not ready but answered":
                pods.pod = {
                    "metadata": {"name": "p"},
                    "status": {"phase": "Running", "conditions": [dict(ready, status="False")]},
                }
                launcher_kubeapi.answered(now)
            time.sleep(0.1)
    finally:
        stop.set()
        t.join(5)
    took = time.monotonic() - t0
    if case in ("healthy", "not ready but answered"):
        assert not told, told
        assert took >= 4
        want = [None] if case == "healthy" else [bound / 4]
        assert pods.asked == want, pods.asked
        return
    assert told and "no answer from the API server for" in told[0], told
    # by the last proof's bound less the stop's margin (grace + every) and the line's lag, give or
    # take the loop's turn
    margin = grace + every + lag
    stopped = told_at[0] - last_proof
    assert bound - margin - 0.01 <= stopped <= bound - margin + every + 0.05, (stopped, told)
    if case == "one-way cut":
        assert pods.asked[-1] == bound / 4, "not Ready: round trips asked for"
    if case == "stream stopped":  # Ready, but no line: it says it falls back to asking
        assert pods.asked[-1] == bound / 4
        assert "no new line of this pod's watch for" in capfd.readouterr().err


def test_the_self_fence_stops_the_program_and_the_task_exits_6(tmp_path):
    """The training container's side: the agent's `stop` file ends a running program (exit 6, which
    its Job retries without counting) and keeps a waiting one from starting."""
    env = {
        "TF_CLUSTER_AGENT_DIR": str(tmp_path),
        "TF_CLUSTER_SELF_FENCE": "240",
        "TF_CLUSTER_WAIT_FOR_PEERS": "false",
        "TF_CLUSTER_STOP_GRACE": "5",
    }
    p = start([sys.executable, "-c", "import time; print('training', flush=True); time.sleep(60)"], tmp_path, **env)
    assert p.stdout.readline().strip() == "training"
    (tmp_path / "stop").write_text("no answer from the API server for 240s\n")
    t0 = time.monotonic()
    _, err = p.communicate(timeout=30)
    assert p.returncode == 6, err
    assert time.monotonic() - t0 < 5, "the agent's file is read every second"
    assert "self-fence: stopping the program (exit 6): no answer from the API server for 240s" in err, err
    p = start([sys.executable, "-c", "print('training')"], tmp_path, **env)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 6 and "training" not in out and "not starting (exit 6)" in err, err


def pod_with_training(state: dict | None) -> dict:
    statuses = [{"name": "tf-cluster-agent", "state": {"running": {}}}]
    if state is not None:
        statuses.append({"name": "tensorflow", "state": state})
    return {"items": [{"status": {"containerStatuses": statuses}}]}


@pytest.mark.parametrize(
    "states,group_min,patched",
    [
        ([{"terminated": {"exitCode": 0}}], 4, True),
        (
            [{"running": {}}, {"running": {}}, {"terminated": {"exitCode": 0}}],
            4,
            True,
        ),  # the kubelet's report came late
        ([{"terminated": {"exitCode": 143}}], 4, False),  # stopped (evicted, deleted): the gang keeps its size
        ([{"running": {}}] * 50, 4, False),  # never reported within the wait
        ([{"terminated": {"exitCode": 0}}], 1, False),  # another task's agent lowered it: one GET, nothing else
    ],
    ids=["finished", "reported-late", "signalled", "no-report", "lowered-already"],
)
def test_a_finished_tasks_agent_lowers_the_gangs_min_count_to_one(states, group_min, patched, monkeypatch, capfd):
    """A task replaced once another task of the run finished could never be placed: a finished pod
    counts no more toward the PodGroup's minCount. The agent of a task whose program exited 0
    lowers it to 1 as the kubelet stops it; one that was stopped (143) or whose status never says
    leaves the gang whole (a run preempted whole must start again whole)."""
    import urllib.error

    calls, given = [], iter(states)
    monkeypatch.setenv("TF_CLUSTER_POD_GROUP", "r-tf-cluster-abc123")
    monkeypatch.setenv("TF_CLUSTER_NAMESPACE", "ml")
    monkeypatch.setenv("TF_CLUSTER_POD_NAME", "r-tf-cluster-chief-abc123-0-xyz")
    group = "/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups/r-tf-cluster-abc123"
    throttled = [True]

    def api(path, method="GET", body=None, content_type=None):
        calls.append((method, path, body))
        if method == "PATCH" and throttled:
            throttled.pop()
            raise urllib.error.HTTPError(path, 429, "Too Many Requests", {}, None)  # tried again
        if path == group:
            return {"spec": {"schedulingPolicy": {"gang": {"minCount": group_min}}}}
        return pod_with_training(next(given, {"running": {}})) if method == "GET" else {}

    monkeypatch.setattr(launcher_gang, "api", api)
    monkeypatch.setattr(launcher_gang.time, "sleep", lambda s: None)
    monkeypatch.setattr(launcher_gang.EVENTS, "record", lambda *a, **k: calls.append(("EVENT", a[0], None)))
    launcher_gang.relax_once_finished(wait=0.5)
    assert calls[0] == ("GET", group, None)
    pod = "/api/v1/namespaces/ml/pods?fieldSelector=metadata.name%3Dr-tf-cluster-chief-abc123-0-xyz"
    assert all(c[1] == pod for c in calls[1:] if c[0] == "GET")
    assert (len(calls) == 1) == (group_min == 1)
    patches = [c for c in calls if c[0] == "PATCH"]
    body = {"spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}}
    want = [("PATCH", group + "?fieldManager=tf-cluster-agent", body)] * 2  # the first one throttled
    assert patches == (want if patched else [])
    assert (("EVENT", "GangRelaxed", None) in calls) == patched
    assert ("minCount is now 1 (was 4)" in capfd.readouterr().err) == patched


@pytest.mark.parametrize(
    "api_version,held,patched,said",
    [
        (
            "scheduling.x-k8s.io/v1alpha1",
            {"spec": {"minMember": 4}},
            {"spec": {"minMember": 1}},
            "minMember is now 1 (was 4)",
        ),
        ("scheduling.x-k8s.io/v1alpha1", {"spec": {"minMember": 1}}, None, ""),  # lowered already
        ("scheduling.x-k8s.io/v1alpha1", {"spec": {"minMember": "four"}}, None, "holds no number at spec.minMember"),
        (
            "scheduling.k8s.io/v1beta1",
            {"spec": {"schedulingPolicy": []}},
            None,
            "holds no number at spec.schedulingPolicy",
        ),
        (
            "scheduling.volcano.sh/v1beta1",
            {"spec": {"minMember": 4}},
            None,
            "TF_CLUSTER_POD_GROUP_API=scheduling.volcano.sh",
        ),
    ],
    ids=["coscheduling", "coscheduling-lowered", "odd-size", "odd-native", "unknown-api"],
)
def test_the_agent_lowers_the_size_where_the_groups_api_holds_it(api_version, held, patched, said, monkeypatch, capfd):
    """scheduler-plugins' coscheduling counts no finished pod toward minMember either: the agent
    lowers the size field of the API TF_CLUSTER_POD_GROUP_API names; a field that holds no number,
    or an API it does not know, leaves the gang as it is, said in the log, and raises nothing."""
    calls = []
    monkeypatch.setenv("TF_CLUSTER_POD_GROUP", "r-tf-cluster-abc123")
    monkeypatch.setenv("TF_CLUSTER_POD_GROUP_API", api_version)
    monkeypatch.setenv("TF_CLUSTER_NAMESPACE", "ml")
    monkeypatch.setenv("TF_CLUSTER_POD_NAME", "r-tf-cluster-chief-abc123-0-xyz")
    group = f"/apis/{api_version}/namespaces/ml/podgroups/r-tf-cluster-abc123"

    def api(path, method="GET", body=None, content_type=None):
        calls.append((method, path, body))
        if path == group:
            return held
        return pod_with_training({"terminated": {"exitCode": 0}}) if method == "GET" else {}

    monkeypatch.setattr(launcher_gang, "api", api)
    monkeypatch.setattr(launcher_gang.time, "sleep", lambda s: None)
    monkeypatch.setattr(launcher_gang.EVENTS, "record", lambda *a, **k: calls.append(("EVENT", a[0], None)))
    launcher_gang.relax_once_finished(wait=0.5)
    patches = [c for c in calls if c[0] == "PATCH"]
    assert patches == ([("PATCH", group + "?fieldManager=tf-cluster-agent", patched)] if patched else [])
    assert (("EVENT", "GangRelaxed", None) in calls) == bool(patched)
    if api_version not in launcher_gang.SIZE_FIELD:
        assert calls == []  # not even a read
    assert said in capfd.readouterr().err


def test_an_agent_the_role_lets_not_lower_the_gang_says_what_to_grant(monkeypatch, capfd):
    import io
    import urllib.error

    def refuse(path, method="GET", body=None, content_type=None):
        raise urllib.error.HTTPError(path, 403, "Forbidden", {}, io.BytesIO(b""))

    monkeypatch.setattr(launcher_gang, "api", refuse)
    assert launcher_gang.relax("ml", "r-tf-cluster-abc123") is False
    said = capfd.readouterr().err
    assert "cannot lower r-tf-cluster-abc123's minCount (HTTP 403)" in said
    assert "give the Role get and patch on podgroups" in said
