"""The split of issue 44: the training container's launcher holds no token; the pod's
tf-cluster-agent sidecar (launcher.py --agent, files/tf_cluster_launcher/agent.py) does the API's
work and tells it through files. These tests play the agent's side by writing those files (or run
the agent's own writer), and check what the task's launcher makes of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tf_cluster import CHART

LAUNCHER = CHART / "files" / "launcher.py"
sys.path.insert(0, str(LAUNCHER.parent))
import tf_cluster_launcher.agent as launcher_agent  # noqa: E402
import tf_cluster_launcher.task as launcher_task  # noqa: E402

SERVE = [sys.executable, "-c", "import time; print('serving', flush=True); time.sleep(600)"]
PS_CLUSTER = {"chief": ["c-0.r:2222"], "worker": ["w-0.r:2222"], "ps": ["p-0.r:2222"]}


def task(agent_dir, role="ps", index=0, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "KUBERNETES_"))}
    full.update(
        {
            "TF_CLUSTER_ROLE": role,
            "TF_TASK_INDEX": str(index),
            "TF_CLUSTER_AGENT_DIR": str(agent_dir),
            "TF_CLUSTER_STRATEGY": "parameterServer",
            "TF_CONFIG": json.dumps({"cluster": PS_CLUSTER, "task": {"type": role, "index": index}}),
            "TF_CLUSTER_SA_DIR": str(agent_dir / "no-token-here"),
            **env,
        }
    )
    return subprocess.Popen(
        [sys.executable, str(LAUNCHER), "--", *SERVE],
        env=full,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize(
    "found,told,read", [([], "ok", []), (["w-0.r"], "missing w-0.r", ["w-0.r"]), (None, "no-api", None)]
)
def test_the_agents_peer_verdict_is_what_the_task_reads(tmp_path, monkeypatch, found, told, read):
    monkeypatch.setenv("TF_CLUSTER_AGENT_DIR", str(tmp_path))
    monkeypatch.setattr(launcher_agent, "wait_for_peer_pods", lambda hosts, timeout, give_up: found)
    launcher_agent.Agent().wait_for_peers(["c-0.r", "w-0.r", "p-0.r"])
    assert (tmp_path / "peers").read_text().splitlines()[0] == told
    run = launcher_task.TaskRun(["true"], {}, {"proc": None, "starting": False}, 1.0, None, None)
    assert run.peers_from_agent(["c-0.r", "w-0.r", "p-0.r"], 5, lambda: False) == read


def test_a_server_stops_when_the_agent_says_the_leader_completed(tmp_path):
    p = task(tmp_path, TF_CLUSTER_STOP_WITH_LEADER="true", TF_CLUSTER_LEADER_JOB="r-chief")
    assert p.stdout.readline().strip() == "serving"
    time.sleep(1)
    assert p.poll() is None, "it serves while the agent says nothing"
    (tmp_path / "leader").write_text("Complete\n")
    t0 = time.monotonic()
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert time.monotonic() - t0 < 3, "the agent's file is read every second"
    assert "leading Job completed; task stopped (exit 0)" in err, err


def test_the_coordinator_restarts_when_the_agent_says_a_peer_was_lost(tmp_path):
    (tmp_path / "peers").write_text(
        "ok\nall 2 peer(s) resolve after 0.1s (their endpoints watched first, by the agent)\n"
    )
    p = task(tmp_path, role="chief", TF_CLUSTER_FENCE_SECONDS="5")
    assert p.stdout.readline().strip() == "serving"
    (tmp_path / "peer-lost").write_text("w-0\n")
    _, err = p.communicate(timeout=30)
    assert p.returncode == 6, err
    assert "all 2 peer(s) resolve after 0.1s" in err  # the agent's word, in the task's log
    assert "w-0 lost with its node; restarting the coordinator (exit 6)" in err, err


def test_the_task_gives_up_when_the_agent_says_peers_are_missing(tmp_path):
    (tmp_path / "peers").write_text("missing w-0.r p-0.r\n2 peer(s) not published after 9.0s\n")
    p = task(tmp_path, role="chief")
    out, err = p.communicate(timeout=30)
    assert p.returncode == 4, err
    assert "peer(s) never resolved: w-0.r, p-0.r" in err and "serving" not in out


def test_the_agent_without_its_folder_says_so():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_")}
    r = subprocess.run([sys.executable, str(LAUNCHER), "--agent"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 5 and "TF_CLUSTER_AGENT_DIR is not set" in r.stderr
