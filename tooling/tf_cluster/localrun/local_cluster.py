"""`LocalCluster`: the rendered release's Indexed Jobs run on this machine. The Job controller's
rules (jobs.py, a pure state machine) decide which pod runs when; this module feeds them the
processes' exits and the clock, and carries their decisions out with processes.py: start an
index's pod, delete a finishing Job's pods (SIGTERM, SIGKILL after the grace period), and write
the leading Job's outcome to the file the launchers of stopping roles poll (as they would poll
the API server in a cluster)."""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import manifests
from ..errors import UsageError
from ..manifests import Pod
from . import leftovers, processes
from .jobs import (
    FAILED,
    CreatePod,
    Decision,
    DeletePods,
    JobController,
    JobSpec,
    LeaderFinished,
    PodExited,
    Release,
    Start,
    Stop,
    Tick,
)
from .processes import OnLine, Task

# an index's phase (jobs.py) -> its task's state in the status table
SHOWN_STATE = {"pending": "pending", "running": "running", "backoff": "backoff", "succeeded": "succeeded"}


@dataclass
class LocalJob:
    """One Job of the release: its tasks (one per index) and its controller."""

    name: str
    role: str
    tasks: list[Task]
    controller: JobController

    @property
    def condition(self) -> str:
        """Complete or Failed once the Job finished, else ''."""
        c = self.controller.condition
        return c.type if c else ""

    @property
    def reason(self) -> str:
        """Why it failed ('' unless it did): the condition's reason and message."""
        c = self.controller.condition
        if not c or c.type != FAILED:
            return ""
        return f"{c.reason}: {c.message}" if c.message else c.reason


class LocalCluster:
    def __init__(
        self,
        docs: list[dict[str, Any]],
        pods: list[Pod],
        workdir: Path,
        *,
        python: str = sys.executable,
        allow_images: tuple[str, ...] = (),
        ignore_gpus: bool = False,
        poll_seconds: float = 1.0,
        restart_delay: float = 10.0,
        stop_grace: float = 10.0,
        on_line: OnLine | None = None,
        isolate: bool | None = None,
    ) -> None:
        """isolate: True = each task in its pod's namespaces (an error if this machine cannot),
        False = plain processes with rewritten paths, None = isolate when possible.
        restart_delay: the Job controller's first backoff (10 s; doubled per failure, 10 min at most).
        stop_grace: seconds a deleted task gets between SIGTERM and SIGKILL."""
        self.workdir = workdir
        self.python = python
        self.stop_grace = stop_grace
        self.on_line: OnLine = on_line or (lambda task, line: None)
        self.leader_file = workdir / "api" / "leader-status"  # what the launchers would ask the API server
        self.lock = threading.Lock()
        processes.check_runnable(pods, allow_images, ignore_gpus)
        self.isolation_problem = processes.sandbox_problem(python) if isolate is not False else "turned off"
        self.no_event_files = ""  # why TensorBoard event files are not read (the `progress` extra missing)
        if isolate and self.isolation_problem:
            raise UsageError(
                f"run-local cannot give each task its own namespaces here ({self.isolation_problem}). "
                "Run as root, allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; "
                "on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0), or pass --no-isolation."
            )
        self.isolated = not self.isolation_problem
        self.address_map = processes.map_addresses(pods)
        maker = processes.TaskMaker(
            workdir,
            python=python,
            isolated=self.isolated,
            address_map=self.address_map,
            leader_file=self.leader_file,
            poll_seconds=poll_seconds,
        )
        maps = manifests.config_maps(docs)
        specs = [JobSpec.from_manifest(d, maps) for d in docs if d.get("kind") == "Job"]
        self.release = Release(specs, backoff=restart_delay)
        self.jobs: list[LocalJob] = []
        for spec in specs:
            job_pods = sorted((p for p in pods if p.job == spec.name), key=lambda p: p.index)
            tasks = [maker.task(p) for p in job_pods]
            role = job_pods[0].role if job_pods else "?"
            self.jobs.append(LocalJob(spec.name, role, tasks, self.release.jobs[spec.name]))
        self._tasks = {(j.name, t.pod.index): t for j in self.jobs for t in j.tasks}
        self.leader = next((j for j in self.jobs if j.name == self.release.leader), None)
        self.started = 0.0

    # ------------------------------------------------------------ running

    def start(self) -> None:
        self.leader_file.parent.mkdir(parents=True, exist_ok=True)
        self.leader_file.write_text("")
        self.started = time.monotonic()
        with self.lock:
            self._carry_out(self.release.handle(Start(self.started)), self.started)

    def step(self) -> None:
        """Report the pods that ended and the time to the Jobs, and do what they decide; call it repeatedly."""
        with self.lock:
            now = time.monotonic()
            for (job, index), task in self._tasks.items():
                code = processes.reap(task, now)
                if code is not None:
                    self._carry_out(self.release.handle(PodExited(job, index, code, now)), now)
            self._carry_out(self.release.handle(Tick(now)), now)
            for task in self._tasks.values():
                processes.kill_overdue(task, now)

    def _carry_out(self, decisions: list[Decision], now: float) -> None:
        for d in decisions:
            if isinstance(d, CreatePod):
                processes.spawn(self._tasks[d.job, d.index], self.on_line, replacement=d.attempt > 0)
            elif isinstance(d, DeletePods):
                for index in d.indexes:
                    processes.delete(self._tasks[d.job, index], now, self.stop_grace)
            elif isinstance(d, LeaderFinished):
                self.leader_file.write_text(d.outcome)
        for job in self.jobs:
            for task in job.tasks:
                ix = job.controller.indexes[task.pod.index]
                task.failures = ix.failures
                task.state = "running" if task.alive else SHOWN_STATE.get(ix.phase, "failed")

    def kill(self, role: str, index: int, sig: int = signal.SIGKILL) -> None:
        """Signal a pod as a node would (processes.signal_pod: SIGTERM to its launcher, SIGKILL to all of it)."""
        for task in self.tasks():
            if task.pod.role == role and task.pod.index == index:
                processes.signal_pod(task, sig)

    @property
    def finished(self) -> bool:
        return self.release.finished

    def time_out(self, timeout: float) -> None:
        """Fail and stop every unfinished Job, as run-local's --timeout does."""
        self.fail_unfinished(f"run-local --timeout {timeout:.0f}s reached")

    def fail_unfinished(self, reason: str) -> None:
        """Fail every unfinished Job with this reason (a timeout, a tuner pruning the run): their
        pods are deleted, and each Job is Failed once they are gone (`step`)."""
        with self.lock:
            now = time.monotonic()
            self._carry_out(self.release.handle(Stop(now, reason)), now)

    def shutdown(self) -> None:
        """Stop everything still running, now (idempotent)."""
        if self.started:
            self.fail_unfinished("run-local stopped")
        for task in self.tasks():
            processes.stop_now(task, self.stop_grace)
        if self.started:
            self.step()

    def tasks(self) -> list[Task]:
        return [t for j in self.jobs for t in j.tasks]

    # ------------------------------------------------------------ where things are, what the tasks left

    def host_path(self, task: Task, path: str) -> str:
        """Where a path the task saw (e.g. /mnt/shared/model) is on this machine."""
        return processes.host_path(task, path)

    def hypertune_file(self, task: str) -> Path:
        """Where a task that is not isolated writes its cloudml-hypertune metrics (CLOUD_ML_HP_METRIC_FILE)."""
        return processes.hypertune_file(self.workdir, task)

    def write_configmaps(self, docs: list[dict[str, Any]]) -> None:
        processes.write_configmaps(self.workdir, docs)

    def read_files(self, only_silent: bool = False) -> None:
        """Fill each task's `reported.files` from the files it wrote (leftovers.read_progress_files)."""
        summary_task = self.leader.tasks[0] if self.leader and self.leader.tasks else None
        problem = leftovers.read_progress_files(
            self.tasks(), self.workdir, summary_task, only_silent=only_silent, events=not self.no_event_files
        )
        self.no_event_files = self.no_event_files or problem

    def private_files(self) -> dict[str, list[str]]:
        return leftovers.private_files(self.tasks())

    def shared_path_hints(self) -> list[str]:
        return leftovers.shared_path_hints(self.tasks())
