"""`tf-cluster install`, `status`, `logs` and `uninstall` on the real node, as a user who only
installed the wheel runs them (a virtualenv outside the repository, no checkout on its PATH or in
its folder): the release installed with the bundled chart until its tasks run, every task's epoch
while it trains, the table redrawn until every Job finished, every task's log under its
`[role-i]`, the release removed; and a gang that can never fit explained in words
(tests/e2e/test_apiserver.py checks the same table without nodes)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time

import pytest
from installed import install_wheel
from needs import absent
from test_cluster import EX, KUBECONFIG, SMALL, epochs, install, say

from tf_cluster import helm, kube

TASK_ROW = re.compile(r"^((?:chief|worker|ps|evaluator)-\d+)\s+(.*)$")


def tf_cluster(*argv, timeout: float = 120) -> subprocess.CompletedProcess:
    """The `tf-cluster` command of this checkout, on the e2e cluster."""
    argv = (sys.executable, "-m", "tf_cluster.cli", *argv, "--kubeconfig", KUBECONFIG)
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def user_tool(tmp_path_factory):
    """A `tf-cluster` function running the installed wheel from the user's folder, where the
    example values (and the e2e node's small requests) are copied."""
    exe, user, env = install_wheel(tmp_path_factory.mktemp("wheel"), helm=helm.Helm("4").argv("version")[0])
    for f in (EX / "mwms-cpu.yaml", SMALL):
        shutil.copy2(f, user / f.name)

    def run(*argv, timeout: float = 120) -> subprocess.CompletedProcess:
        argv = (exe, *argv, "--kubeconfig", KUBECONFIG)
        return subprocess.run(
            [str(a) for a in argv], cwd=user, env=env, capture_output=True, text=True, timeout=timeout
        )

    return run


def task_rows(out: str) -> dict[str, str]:
    """The status table's rows (task -> the rest of its row) of the last table in `out`."""
    rows: dict[str, str] = {}
    for line in out.splitlines():
        if line.startswith("TASK "):
            rows = {}
        m = TASK_ROW.match(line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def test_the_installed_command_installs_watches_to_complete_and_uninstalls_a_release(api, ns, user_tool):
    tf_cluster = user_tool
    run_length = [f"--set-string={kv}" for kv in epochs(10, 300)]  # ~5 s an epoch here: status sees it train
    t0 = time.monotonic()
    r = tf_cluster("install", "st", "-f", "mwms-cpu.yaml", "-f", SMALL.name, *run_length, "-n", ns, timeout=600)
    say(f"tf-cluster install returned after {time.monotonic() - t0:.0f}s:\n{r.stdout[-2500:]}")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    assert "stopped waiting: every task started" in r.stdout
    rows = task_rows(r.stdout)
    assert set(rows) == {"worker-0", "worker-1"} and all(
        row.startswith(("running", "succeeded")) for row in rows.values()
    )
    deadline = time.monotonic() + 600
    while True:
        r = tf_cluster("status", "st", "-n", ns)
        assert r.returncode == 0, r.stderr
        rows = task_rows(r.stdout)
        training = {t for t, row in rows.items() if re.search(r"^running\s.*\bepoch \d+/10, loss \d", row)}
        if training == {"worker-0", "worker-1"}:
            break
        assert time.monotonic() < deadline, r.stdout + "\n" + kube.diagnostics(api, ns, "st")
        time.sleep(3)
    say(f"tf-cluster status while training:\n{r.stdout}")
    assert set(rows) == {"worker-0", "worker-1"}
    assert re.search(r"Job st-tf-cluster-worker-\w+: running \(0/2 done, 2 active", r.stdout), r.stdout
    assert "accuracy" in rows["worker-0"] and "accuracy" in rows["worker-1"]

    merged = tf_cluster("logs", "st", "-n", ns)
    assert merged.returncode == 0, merged.stderr
    for task in ("worker-0", "worker-1"):  # the progress protocol in words, as run-local prints it
        assert re.search(rf"^\[{task}\] epoch \d+/10 .*loss \d", merged.stdout, re.M), merged.stdout[-3000:]

    t0 = time.monotonic()
    watched = tf_cluster("status", "st", "-n", ns, "--watch", "--interval", "5", timeout=900)
    say(f"tf-cluster status --watch ended by itself after {time.monotonic() - t0:.0f}s; its last table:")
    last = watched.stdout.split("--- ")[-1]
    say(last)
    assert watched.returncode == 0, watched.stderr
    assert "every Job finished" in last.splitlines()[1]
    rows = task_rows(last)
    assert all(row.startswith("succeeded") and "epoch 10/10" in row for row in rows.values()), last

    followed = tf_cluster("logs", "st", "-n", ns, "--follow", "--role", "worker", timeout=120)
    assert followed.returncode == 0, followed.stderr  # every Job finished: the streams end, so does logs -f
    for task in ("worker-0", "worker-1"):
        assert re.search(rf"^\[{task}\] epoch 10/10 .*loss \d", followed.stdout, re.M), followed.stdout[-3000:]

    gone = tf_cluster("uninstall", "st", "-n", ns, timeout=400)
    say(gone.stdout.strip())
    assert gone.returncode == 0, gone.stderr
    assert "release st uninstalled" in gone.stdout and "kept" not in gone.stdout
    assert kube.release_objects(api, ns, "st", count_terminating=False) == []


def test_status_explains_a_gang_too_big_to_fit(api, ns):
    if not kube.serves_gang_api(api):
        absent(
            "the PodGroup API (scheduling.k8s.io/v1beta1)", "a cluster serving it (1.37, GenericWorkload): `make e2e`"
        )
    install(
        ns,
        "big",
        EX / "mwms-cpu.yaml",
        sets=(
            "roles.worker.resources.requests.cpu=3",  # each; the node has 2 CPUs
            "roles.worker.resources.limits.cpu=3",
            "storage.checkpoints.type=emptyDir",
        ),
    )
    deadline = time.monotonic() + 120
    while True:
        r = tf_cluster("status", "big", "-n", ns)
        assert r.returncode == 0, r.stderr
        if "Gangs:" in r.stdout:
            break
        assert time.monotonic() < deadline, r.stdout
        time.sleep(3)
    say(f"tf-cluster status of a gang that cannot fit:\n{r.stdout}")
    rows = task_rows(r.stdout)
    assert set(rows) == {"worker-0", "worker-1"}
    assert all(row.startswith("pending (") for row in rows.values()), rows  # with the scheduler's reason
    gangs = r.stdout.split("Gangs:\n")[1]
    assert "0 of 2 tasks placed (minCount 2)" in gangs and "It can never start" in gangs
    assert "cpu 6 > 2" in gangs and "Lower roles.*.resources or replicas, or add nodes" in gangs
