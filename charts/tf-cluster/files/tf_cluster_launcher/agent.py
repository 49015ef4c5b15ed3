"""The agent: the launcher's work that needs the Kubernetes API, in the pod's `tf-cluster-agent`
container (a native sidecar, the only container that mounts the pod's service-account token), so
that the training container, and the user's program in it, holds no credential.

    python3 launcher.py --agent

It follows the leading Job (or the notebook coordinator's heartbeat), waits for the peers through
the API, fences pods stranded on a lost node (as a fencer by rule, or once a fencer asks it to:
fencing.deputy_wanted), watches its own task's pods (the self-fence, and that request), and records
the lifecycle's Events. It tells the
training container's launcher through files in a directory that only it can write
(TF_CLUSTER_AGENT_DIR, an emptyDir the training container mounts read-only):

    leader      how the leading Job ended (Complete, Failed, Gone, Unwatchable, Abandoned): the
                launcher reads it as run-local's TF_CLUSTER_LEADER_STATUS_FILE
    peers       the peer wait's verdict: "ok", "missing <host> ...", or "no-api" (the launcher then
                waits on DNS itself); a second line says what happened, for the task's log
    peer-lost   the ParameterServer coordinator's peers lost with their node: it restarts
    stop        the self-fence (selffence.py): why the program must stop now; the task exits 6

It runs until the pod's containers stop (SIGTERM from the kubelet once the training container has
exited) and exits 0; then, in a gang (TF_CLUSTER_POD_GROUP), if the program exited 0, it lowers the
gang's size (minCount; coscheduling's minMember) to 1 (gang.py).
"""

from __future__ import annotations

import os
import signal
import threading
import time

from .common import ConfigError, env, log
from .events import EVENTS
from .fencing import deputy_reason, fence_loop, fences
from .gang import relax_once_finished
from .informer import Informer
from .leader import leader_condition_at_start, record_leader_event, watch_leader
from .peerpods import peer_service, wait_for_peer_pods
from .selffence import pulse_loop, pulse_writer, self_fence_loop, task_pods
from .tfconfig import cluster_of, peers_needed

LEADER, PEERS, PEER_LOST, STOP = "leader", "peers", "peer-lost", "stop"


def agent_file(name: str) -> str:
    return os.path.join(env("TF_CLUSTER_AGENT_DIR"), name)


def tell(name: str, text: str) -> None:
    """Write the file whole (a reader never sees half of it)."""
    path = agent_file(name)
    with open(path + ".tmp", "w") as f:
        f.write(text + "\n")
    os.replace(path + ".tmp", path)


def read_told(name: str) -> str:
    """What the agent wrote in `name`, "" while it wrote nothing (or outside the chart's pods)."""
    if not env("TF_CLUSTER_AGENT_DIR"):
        return ""
    try:
        with open(agent_file(name)) as f:
            return f.read()
    except OSError:
        return ""


class Agent:
    def __init__(self) -> None:
        self.stop = threading.Event()  # SIGTERM: the pod's containers stop
        self.leader_ended = threading.Event()
        self.role, self.index = env("TF_CLUSTER_ROLE", "task"), int(env("TF_TASK_INDEX", "0") or 0)
        self.coordinator = env("TF_CLUSTER_STRATEGY") == "parameterServer" and self.role == "chief"

    def run(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: self.stop.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop.set())
        if not env("TF_CLUSTER_AGENT_DIR"):
            log("TF_CLUSTER_AGENT_DIR is not set: the agent has nowhere to tell the task what it learns")
            return 5
        try:
            hosts = peers_needed(env("TF_CONFIG"), env("TF_CLUSTER_STRATEGY"), self.role)
            fencer = fences(env("TF_CONFIG"), self.role, self.index)
        except ConfigError as e:
            log(str(e))  # the training container's launcher says it too, and exits 5
            self.stop.wait()
            return 0
        if env("TF_CLUSTER_STOP_WITH_LEADER") == "true":
            threading.Thread(target=self.follow_leader, daemon=True).start()
        fencing = float(env("TF_CLUSTER_FENCE_SECONDS", "0") or 0) > 0
        if fencer and fencing:
            on_lost = self.on_peer_lost if self.coordinator else None
            threading.Thread(target=fence_loop, daemon=True, args=(self.stop, on_lost)).start()
        bound = float(env("TF_CLUSTER_SELF_FENCE", "0") or 0)
        pods = task_pods() if bound > 0 or (fencing and not fencer) else None
        if pods is not None and bound > 0:
            args = (self.stop, bound, lambda why: tell(STOP, why), pods)
            threading.Thread(target=self_fence_loop, daemon=True, args=args).start()
            writer = pulse_writer(cluster_of(env("TF_CONFIG")), notebook_chief=bool(env("TF_CLUSTER_HEARTBEAT")))
            if fencing and writer == (self.role, self.index):
                threading.Thread(target=pulse_loop, daemon=True, args=(self.stop,)).start()
        if pods is not None and fencing and not fencer:
            threading.Thread(target=self.fence_when_asked, daemon=True, args=(pods,)).start()
        if hosts and env("TF_CLUSTER_WAIT_FOR_PEERS", "true") == "true":
            self.wait_for_peers(hosts)
        self.stop.wait()
        relax_once_finished()  # the training container has ended: the kubelet stops its sidecars
        return 0

    def fence_when_asked(self, pods: Informer, every: float = 5.0) -> None:
        """Fence too once a fencer asks this task to (a DEPUTY condition on any of its pods)."""
        while not self.stop.wait(every):
            if pods.forbidden:
                return  # the self-fence says why, or nothing fences here without the Role's pods watch
            why = next((r for p in pods.snapshot() if (r := deputy_reason(p))), None)
            if why:
                log("fencing too, as a fencer asked: %s" % why)
                fence_loop(self.stop)
                return

    def follow_leader(self) -> None:
        cond = leader_condition_at_start()
        if cond:
            self.on_leader_finished(cond, already=True)
            return
        watch_leader(float(env("TF_CLUSTER_POLL_SECONDS", "5")), self.on_leader_finished, self.stop)

    def on_leader_finished(self, cond: str, already: bool = False) -> None:
        tell(LEADER, cond)
        self.leader_ended.set()
        record_leader_event(cond, already)

    def wait_for_peers(self, hosts: list[str]) -> None:
        start = time.monotonic()
        timeout = float(env("TF_CLUSTER_PEER_TIMEOUT", "600"))
        missing = wait_for_peer_pods(hosts, timeout, give_up=lambda: self.stop.is_set() or self.leader_ended.is_set())
        took = time.monotonic() - start
        if missing is None:
            tell(PEERS, "no-api\nthe agent cannot read the peers through the API: waiting on DNS")
        elif missing:
            tell(PEERS, "missing %s\n%d peer(s) not published after %.1fs" % (" ".join(missing), len(missing), took))
        else:
            what = "endpoints" if len(hosts) > 1 and peer_service(hosts) else "pods"
            tell(
                PEERS,
                "ok\nall %d peer(s) resolve after %.1fs (their %s watched first, by the agent)"
                % (len(hosts), took, what),
            )

    def on_peer_lost(self, names: list[str]) -> None:
        tell(PEER_LOST, " ".join(names))
        EVENTS.record(
            "RestartingCoordinator",
            "%s lost with its node: the coordinator stops and its Job starts it again, reconnecting to "
            "the replacement" % ", ".join(names),
            warning=True,
        )
