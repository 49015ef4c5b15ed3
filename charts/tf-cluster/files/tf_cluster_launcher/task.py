"""A task from start to exit code: the signal handlers, the peer wait, the child, and what its exit
means; `--check` for `helm test`."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Callable, Sequence

from .agent import LEADER, PEER_LOST, PEERS, STOP, agent_file, read_told
from .child import end_group, group_left, signal_group, start_child, stop_child
from .common import (
    ABANDONED,
    EXIT_CONFIG,
    EXIT_LEADER_FAILED,
    EXIT_PEER_LOST,
    EXIT_PEERS_TIMEOUT,
    GONE,
    SUCCESS,
    UNWATCHABLE,
    ConfigError,
    Stopped,
    env,
    log,
)
from .events import EVENTS
from .fencing import fence_loop, fences
from .incarnation import hosts_to_watch, watch_incarnation
from .leader import (
    leader_condition_at_start,
    leader_condition_or_empty,
    leader_name,
    record_leader_event,
    watch_leader,
)
from .metrics import Metrics
from .peerpods import wait_for_peer_pods
from .progress import echo_metrics
from .tfconfig import describe, peers_needed, wait_for_peers

if TYPE_CHECKING:
    import subprocess
    from types import FrameType
    from typing import TypedDict

    class Outcome(TypedDict, total=False):
        """What happened to a task (run's `outcome`), each key once it did."""

        signal: int  # the first signal received
        leader: str  # how the leading Job ended (the watch's word)
        killed: bool  # the child was killed after the grace
        timer: threading.Timer  # kills the child once a forwarded signal's grace is over

    class Task(TypedDict):
        """The child (run's `task`)."""

        proc: subprocess.Popen[bytes]  # None until it started: read only where it has (see run)
        starting: bool  # it is being started: a signal waits for it


def run(argv: list[str]) -> int:
    if not argv:
        log("no command given: usage: launcher.py -- <command> [args...]")
        return EXIT_CONFIG
    outcome: Outcome = {}  # "signal": the first one received; "leader": how the leading Job ended; "killed"
    # "proc" is None until the child starts: kill_if_running and forward run only once it has
    task: Task = {"proc": None, "starting": False}  # type: ignore[typeddict-item]
    grace = float(env("TF_CLUSTER_STOP_GRACE", "20"))

    def kill_if_running(signum: int) -> None:
        proc = task["proc"]
        if proc.poll() is None:  # (reaped once it exited: group_left may then reap the rest)
            log(
                "child still running %ss after signal %d (TensorFlow catches SIGTERM in multi-worker "
                "runs); killing it and its process group" % (grace, signum)
            )
        elif group_left(proc):
            log("the command's process group still runs %ss after signal %d; killing it" % (grace, signum))
        else:
            return
        outcome["killed"] = True
        signal_group(proc, signal.SIGKILL)

    def forward(signum: int) -> None:
        proc = task["proc"]
        log("got signal %d; forwarding to the command's process group (it has %ss to exit)" % (signum, grace))
        if proc.poll() is None:
            signal_group(proc, signum)
            if "timer" not in outcome:  # TF's coordination service catches SIGTERM and trains on: bound it
                outcome["timer"] = threading.Timer(grace, kill_if_running, args=(signum,))
                outcome["timer"].daemon = True
                outcome["timer"].start()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        """Installed first: the launcher is the container's PID 1, and the kernel ignores a signal
        PID 1 left at its default action, so without this a pod deleted while it waits for its peers
        would wait for the kubelet's SIGKILL."""
        proc = task["proc"]
        if proc is not None and proc.returncode is not None:  # the command is over: its exit code stands
            log("got signal %d after the command exited; stopping what it left in its process group" % signum)
            signal_group(proc, signum)
            return
        outcome.setdefault("signal", signum)
        if task["proc"] is not None:
            forward(signum)
        elif not task["starting"]:
            raise Stopped(signum)
        # else: the child is being started; run_task forwards the signal once it exists

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics: Metrics | None = None
    try:
        metrics = Metrics.from_env()  # None: metrics.enabled=false, the child writes to our stdout itself
        return TaskRun(argv, outcome, task, grace, forward, metrics).run()
    except Stopped as e:
        log("got signal %d before the command started; exiting %d without starting it" % (e.signum, 128 + e.signum))
        if metrics is not None:
            metrics.set_state("exited")
        return 128 + e.signum


def leader_exit(cond: str, already: bool) -> int:
    """The exit code and log line of a task whose leading Job ended as `cond` (the watch's word), the
    child stopped (or, `already`, never started)."""
    what = leader_name()
    if cond == UNWATCHABLE:
        log("task stopped (exit %d): a task that cannot watch %s would never end" % (EXIT_CONFIG, what))
        return EXIT_CONFIG
    if cond == GONE:
        log(
            "%s no longer exists; task stopped (exit %d: this run cannot complete; install or upgrade the "
            "release for a new one)" % (what, EXIT_LEADER_FAILED)
        )
        record_leader_event(cond, already)
        return EXIT_LEADER_FAILED
    record_leader_event(cond, already)
    if already:
        log("%s is already %s; nothing to do" % (what, cond))
        return EXIT_LEADER_FAILED if cond == "Failed" else 0
    if cond == "Complete":
        if env("TF_CLUSTER_HEARTBEAT"):
            log("%s is done; task stopped (exit 0)" % what)
        else:
            log("leading Job completed; task stopped (exit 0)")
        return 0
    if cond == ABANDONED:
        log(
            "%s is gone; task stopped (exit 0): reinstall or upgrade the release (a new run) to serve "
            "a new session" % what
        )
        return 0
    log("leading Job failed; task stopped (exit %d)" % EXIT_LEADER_FAILED)
    return EXIT_LEADER_FAILED


class TaskRun:
    """One task's run, from its peer wait to its exit code: `run` below installs the signal handlers
    and hands the shared state over (`outcome`: "signal", the first one received; "leader", how the
    leading Job ended; "killed". `task`: the child process once started, "starting" while it is)."""

    def __init__(
        self,
        argv: list[str],
        outcome: Outcome,
        task: Task,
        grace: float,
        forward: Callable[[int], None],
        metrics: Metrics | None,
    ) -> None:
        self.argv, self.outcome, self.task, self.grace, self.forward = argv, outcome, task, grace, forward
        self.metrics = metrics
        self.role, self.index = env("TF_CLUSTER_ROLE", "task"), int(env("TF_TASK_INDEX", "0") or 0)
        self.stops_with_leader = env("TF_CLUSTER_STOP_WITH_LEADER") == "true"
        self.coordinator = env("TF_CLUSTER_STRATEGY") == "parameterServer" and self.role == "chief"
        self.fencing = threading.Event()  # never set: the fence runs as long as the task
        self.stop_event = threading.Event()  # the child has exited: the helper threads end
        # why the launcher stopped the program for its Job to start it again (exit 6), if it did:
        # "self-fence", "replaced" (a host of hosts_to_watch: the MWMS leader, a ps), "peer" (the
        # coordinator's, lost with its node)
        self.restarted_for = ""
        self.restarts = self.self_fences = False  # decided in run()
        # the pod's tf-cluster-agent container does what needs the API and tells this one in files
        self.agent = bool(env("TF_CLUSTER_AGENT_DIR"))
        if self.agent and self.stops_with_leader:
            os.environ.setdefault("TF_CLUSTER_LEADER_STATUS_FILE", agent_file(LEADER))

    def set_state(self, state: str, unless: Sequence[str] = ()) -> None:
        if self.metrics is not None:
            self.metrics.set_state(state, unless=unless)

    def ended(self, code: int) -> int:
        """The task ends before its child started: the helper threads stop."""
        self.set_state("exited")
        self.stop_event.set()
        return code

    def finished_exit(self) -> int:
        return self.ended(leader_exit(self.outcome["leader"], already=True))

    def run(self) -> int:
        try:
            hosts = peers_needed(env("TF_CONFIG"), env("TF_CLUSTER_STRATEGY"), self.role)
            fencer = fences(env("TF_CONFIG"), self.role, self.index)
        except ConfigError as e:
            log(str(e))
            return EXIT_CONFIG
        if env("TF_CONFIG"):
            log(describe(env("TF_CONFIG")))
        fencer = fencer and float(env("TF_CLUSTER_FENCE_SECONDS", "0") or 0) > 0
        self.self_fences = self.agent and float(env("TF_CLUSTER_SELF_FENCE", "0") or 0) > 0
        # does this task's Job retry exit 6 without counting? The chart decides, for its
        # podFailurePolicy and here (tf-cluster.restartsUncounted)
        self.restarts = env("TF_CLUSTER_RESTARTS") == "true"
        if fencer and not self.coordinator and not self.agent:
            threading.Thread(target=fence_loop, daemon=True, args=(self.fencing,)).start()
        if self.metrics is not None:
            self.metrics.serve()
        if self.stops_with_leader and self.follow_leader():
            return self.finished_exit()
        code = self.wait_for_peers(hosts)
        if code is not None:
            return code
        if "leader" in self.outcome:
            return self.finished_exit()
        told = read_told(STOP).strip() if self.self_fences else ""
        if told:  # cut off while it waited: its replacement may be starting elsewhere
            log("not starting (exit %d): %s" % (EXIT_PEER_LOST, told))
            return self.ended(EXIT_PEER_LOST)
        prepare_child_env()
        log("starting: %s" % " ".join(self.argv))
        self.task["starting"] = True  # a signal from here on waits for the child, then is forwarded to it
        try:
            proc, pumps = start_child(self.argv, self.metrics)
        except OSError as e:
            log("cannot start %s: %s" % (self.argv[0], e))
            return self.ended(127)
        return self.supervise(proc, pumps, fencer and self.coordinator)

    def peers_from_agent(self, hosts: list[str], timeout: float, give_up: Callable[[], bool]) -> list[str] | None:
        """The agent's verdict on the peers (agent.py, PEERS): [] when they resolve, the missing
        hosts, or None when the agent cannot read the API (wait on DNS)."""
        start = last = time.monotonic()
        while time.monotonic() - start < timeout:
            told = read_told(PEERS).splitlines()
            if told:
                log(told[1] if len(told) > 1 else told[0])
                word, _, rest = told[0].partition(" ")
                return None if word == "no-api" else (rest.split() if word == "missing" else [])
            if give_up():
                return hosts
            if time.monotonic() - last >= 5:
                log(
                    "waiting for %d peer(s) (%ds/%ds): the tf-cluster-agent container watches them "
                    "(kubectl logs %s -c tf-cluster-agent)"
                    % (len(hosts), time.monotonic() - start, timeout, env("TF_CLUSTER_POD_NAME", "<pod>"))
                )
                last = time.monotonic()
            time.sleep(0.2)
        log("the tf-cluster-agent container gave no word on the peers within %ds" % timeout)
        return hosts

    def follow_leader(self) -> bool:
        """Watch the leading Job from the start (it may end, or be deleted, while this task waits for
        its peers). True when it has ended already: a replacement started after the run exits at once."""
        cond = leader_condition_at_start()
        if cond:
            self.outcome["leader"] = cond
            return True

        def on_finished(cond: str) -> None:
            self.outcome["leader"] = cond
            self.set_state("stopped_by_leader")
            if self.task["proc"] is not None:
                stop_child(self.task["proc"], self.grace)

        poll = 1.0 if self.agent else float(env("TF_CLUSTER_POLL_SECONDS", "5"))  # the agent's file: cheap
        threading.Thread(target=watch_leader, daemon=True, args=(poll, on_finished, self.stop_event)).start()
        return False

    def wait_for_peers(self, hosts: list[str]) -> int | None:
        """None once the peers resolve (or none are needed), else the exit code."""
        if not hosts or env("TF_CLUSTER_WAIT_FOR_PEERS", "true") != "true":
            return None
        timeout = float(env("TF_CLUSTER_PEER_TIMEOUT", "600"))
        if self.metrics is not None:
            self.metrics.waiting(time.monotonic())

        def give_up() -> bool:
            return "leader" in self.outcome

        if self.agent:
            missing = self.peers_from_agent(hosts, timeout, give_up)
        else:
            missing = wait_for_peer_pods(hosts, timeout, give_up=give_up)
        if missing is None:
            missing = wait_for_peers(hosts, timeout, give_up=give_up)
        if self.metrics is not None:
            self.metrics.waited_until(time.monotonic())
        if "leader" in self.outcome:
            return self.finished_exit()
        if missing:
            log(
                "gave up after %ds: %d peer(s) never resolved: %s. Check that their pods "
                "exist (kubectl get pods) and that the headless Service publishes not-ready "
                "addresses." % (timeout, len(missing), ", ".join(missing))
            )
            return self.ended(EXIT_PEERS_TIMEOUT)
        return None

    def supervise(self, proc: subprocess.Popen[bytes], pumps: list[threading.Thread], coordinator_fences: bool) -> int:
        """The child runs: forward what arrived while it started, echo hypertune's reports, fence as the
        ParameterServer coordinator; then its exit code, read with what happened meanwhile."""
        self.task["proc"] = proc
        if "signal" in self.outcome:  # arrived while the child was being started
            self.forward(self.outcome["signal"])
        if "leader" in self.outcome:  # the leader ended while the child was being started
            stop_child(proc, self.grace)
        on_line = self.metrics.read_line if self.metrics is not None else None
        echo = threading.Thread(target=echo_metrics, daemon=True, args=(self.stop_event,), kwargs={"on_line": on_line})
        echo.start()
        if coordinator_fences and self.agent:
            lost = (PEER_LOST, lambda told: self.on_peer_lost(told.split()))
            threading.Thread(target=self.until_told, daemon=True, args=lost).start()
        elif coordinator_fences:
            threading.Thread(target=fence_loop, daemon=True, args=(self.fencing, self.on_peer_lost)).start()
        if self.self_fences:
            threading.Thread(target=self.until_told, daemon=True, args=(STOP, self.on_self_fence)).start()
        every = float(env("TF_CLUSTER_INCARNATION_SECONDS", "10"))
        for host in hosts_to_watch(env("TF_CONFIG"), env("TF_CLUSTER_STRATEGY"), self.role, self.index):
            args = (host, self.stop_event, self.on_peer_replaced, every)
            kwargs = {"on_moved": self.on_peer_moved}
            threading.Thread(target=watch_incarnation, daemon=True, args=args, kwargs=kwargs).start()
        rc = proc.wait()
        end_group(proc, self.grace)  # a wrapped command's program may still be saving: wait for it
        self.stop_event.set()
        echo.join(5)
        deadline = time.monotonic() + 5  # the child's last output; a process it left behind may hold the pipes
        for t in pumps:
            t.join(max(0.0, deadline - time.monotonic()))
        self.set_state("exited", unless=("stopped_by_leader",))
        return self.exit_code(rc)

    def until_told(self, name: str, act: Callable[[str], bool]) -> None:
        """Read the agent's file `name` every second until `act(what it says)` is done with it: a
        peer lost (the agent fences as the ParameterServer coordinator), a self-fence's stop."""
        while not self.stop_event.wait(1.0):
            told = read_told(name).strip()
            if told and act(told):
                return

    def on_peer_lost(self, names: list[str]) -> bool:
        log(
            "%s lost with its node; restarting the coordinator (exit %d) so it reconnects to the "
            "replacement from its last checkpoint: TensorFlow's coordinator would wait on the lost "
            "worker's RPCs until TCP gives up (~15 min)" % (", ".join(names), EXIT_PEER_LOST)
        )
        self.restarted_for = "peer"
        stop_child(self.task["proc"], self.grace)
        return True

    def on_self_fence(self, why: str) -> bool:
        """The agent says the program must stop (selffence.py): it cannot confirm the task is still
        wanted, and the fence may start its replacement once the bound has passed."""
        proc = self.task["proc"]
        if proc is None or proc.poll() is not None:
            return False
        log("self-fence: stopping the program (exit %d): %s" % (EXIT_PEER_LOST, why))
        self.restarted_for = "self-fence"
        stop_child(proc, self.grace)
        return True

    def on_peer_moved(self, host: str, old: list[str], new: list[str]) -> None:
        """A watched host names a new address, but this task's program never reached the old one (it
        started as the old one ended): nothing to restart, its channel resolves the name again."""
        log(
            "%s now answers at %s (was %s); this task's program held no connection to the old address, "
            "so it reaches the new one itself: no restart" % (host, ", ".join(new), ", ".join(old))
        )

    def on_peer_replaced(self, host: str, old: list[str], new: list[str]) -> None:
        """A host of hosts_to_watch() names a new address: restart (exit 6) so that the program
        reaches the replacement rather than wait on the vanished incarnation."""
        proc = self.task["proc"]
        if proc is None or proc.poll() is not None or self.restarted_for:
            return  # the program ended by itself (its own exit code says how), or is being restarted
        if env("TF_CLUSTER_STRATEGY") == "parameterServer":
            why = (
                "the ps %s was replaced (now %s, was %s): this worker's channel to the old one waits on a "
                "machine gone with its node; restarting (exit %d) so that the coordinator's next "
                "closures reach the new one" % (host, ", ".join(new), ", ".join(old), EXIT_PEER_LOST)
            )
        else:
            why = (
                "the coordination leader %s was replaced (now %s, was %s): this task's collectives wait on "
                "the old one, gone with its node; restarting (exit %d) so that it joins the new one from "
                "the last checkpoint" % (host, ", ".join(new), ", ".join(old), EXIT_PEER_LOST)
            )
        log(why)
        self.restarted_for = "replaced"
        stop_child(proc, self.grace)

    def exit_code(self, rc: int) -> int:
        """The task's exit code once its child exited with `rc`."""
        outcome = self.outcome
        if outcome.get("leader"):
            return leader_exit(outcome["leader"], already=False)
        if "signal" in outcome and self.leader_succeeded():
            return 0
        if self.restarted_for == "self-fence":
            log("task stopped by its self-fence (exit %d): its Job starts it again" % EXIT_PEER_LOST)
            return EXIT_PEER_LOST
        if self.restarted_for == "replaced":
            log(
                "task stopped after a peer it depends on was replaced (exit %d): its Job starts it again"
                % EXIT_PEER_LOST
            )
            return EXIT_PEER_LOST
        if self.restarted_for == "peer":
            log("coordinator stopped after a lost peer (exit %d): its Job starts it again" % EXIT_PEER_LOST)
            EVENTS.record(
                "RestartingCoordinator",
                "a peer was lost with its node: the coordinator stops (exit %d) "
                "and its Job starts it again, reconnecting to the replacement" % EXIT_PEER_LOST,
                warning=True,
            )
            return EXIT_PEER_LOST
        if "signal" in outcome and (outcome.get("killed") or rc == 0):
            # killed after the grace, or it saved and exited 0 (as TensorFlow's preemption handling and
            # many programs do): it did not finish, and its Job must run it again, not count it done
            signum = outcome["signal"]
            log(
                "task stopped by signal %d before the run was over (the command %s; exit %d, so that its Job "
                "runs it again)" % (signum, "was killed" if outcome.get("killed") else "exited 0", 128 + signum)
            )
            return 128 + signum
        if rc < 0:
            rc = 128 - rc
        if rc == EXIT_PEER_LOST and self.restarts:
            log(
                "command exited with %d, the code this launcher keeps for its restart after a lost peer "
                "(which its Job retries without counting): exit 1 instead, so that its Job counts it" % rc
            )
            return 1
        log("command exited with %d" % rc)
        return rc

    def leader_succeeded(self) -> bool:
        """Stopped by the pod's termination: when the leading Job has just completed, that is the Job
        controller ending this (finished) Job's other tasks, not a failure."""
        cond = leader_condition_or_empty() if (self.stops_with_leader or env("TF_CLUSTER_LEADER_JOB")) else ""
        if cond in SUCCESS:
            log("%s is %s; task stopped (exit 0)" % (leader_name(), cond))
            return True
        return False


def prepare_child_env() -> None:
    """What the child's environment needs from the launcher: a word when TF_CONFIG is absent, and
    inter-op threads beside the intra-op ones the chart derives from the CPU limit."""
    if not env("TF_CONFIG"):
        log(
            "TF_CONFIG is not set: this release has one training task, which trains without a "
            "cluster (no gRPC server, no peers), as TFJob does. A program that reads "
            "TF_CONFIG['task'] needs it: set tfConfig.alwaysSet=true."
        )
    intra = env("TF_NUM_INTRAOP_THREADS")
    if intra.isdigit() and not env("TF_NUM_INTEROP_THREADS"):
        # One inter-op thread deadlocks ParameterServerStrategy's fit (measured, TF 2.21).
        os.environ["TF_NUM_INTEROP_THREADS"] = str(max(2, int(intra)))
