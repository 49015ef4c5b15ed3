"""`LocalRunner`: the runner seam (tf_cluster.runner) over a `LocalCluster`: the release's pods as
processes on this machine, with Kubernetes' Job semantics."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..manifests import Pod
from ..runner import Cancel, JobReport, Runner, RunReport, Say, TaskReport, status_table
from .local_cluster import LocalCluster
from .processes import Task


class LocalRunner(Runner):
    """Runs a rendered release as local processes. `cluster` runs its Jobs (their rules are
    jobs.py's: restarts, failure policy, the leader's condition); this class drives and reports it."""

    def __init__(
        self, docs: list[dict[str, Any]], pods: list[Pod], workdir: Path, *, status_every: float = 5.0, **options: Any
    ) -> None:
        self.cluster = LocalCluster(docs, pods, workdir, **options)
        self.cluster.write_configmaps(docs)
        self.where = str(workdir)
        self.status_every = status_every
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.monotonic()
        self.cluster.start()

    def watch(self, timeout: float, on_update: Say = print, cancel: Cancel | None = None) -> RunReport:
        """The status table is said when a task's state or progress changed (checked every
        `status_every` s), and at least once a minute while nothing changes."""
        last, shown = time.monotonic(), ""
        while not self.cluster.finished:
            time.sleep(0.2)
            self.cluster.step()
            now = time.monotonic()
            if now - last >= self.status_every:
                self.cluster.read_files(only_silent=True)
                tasks = self.cluster.tasks()
                state = repr([(t.name, t.state, t.failures, t.reported.summary()) for t in tasks])
                if state != shown or now - last >= 60:
                    on_update("\n" + status_table([task_report(t, now) for t in tasks]) + "\n")
                    shown, last = state, now
            if now - self.cluster.started > timeout:
                self.cluster.time_out(timeout)
            reason = cancel() if cancel else ""
            if reason:
                self.cluster.fail_unfinished(reason)
        return self.report()

    def report(self) -> RunReport:
        self.cluster.read_files()
        now = time.monotonic()
        jobs = [JobReport(j.name, j.role, j.condition, j.reason) for j in self.cluster.jobs]
        tasks = [task_report(t, now) for t in self.cluster.tasks()]
        return RunReport(self.where, jobs, tasks, now - self._t0 if self._t0 else 0.0)

    def stop(self) -> None:
        self.cluster.shutdown()

    def kill(self, role: str, index: int, sig: int) -> None:
        """Signal one pod as a node would (processes.signal_pod)."""
        self.cluster.kill(role, index, sig)


def task_report(t: Task, now: float) -> TaskReport:
    """A task as the runner seam reports it (its time: from its first start to its end, or `now`)."""
    end = t.ended if t.state in ("succeeded", "failed") else now
    seconds = end - t.first_start if t.first_start else None
    return TaskReport(t.name, t.pod.role, t.pod.index, t.state, t.failures, list(t.exit_codes), seconds, t.reported)
