"""A release running somewhere: the seam every command that runs training plugs into.

    runner = LocalRunner(...)  or  ClusterRunner(...)
    runner.start()                              # launch every task of the release
    report = runner.watch(timeout, on_update)   # block until every Job is Complete or Failed
    runner.stop()                               # tear down (idempotent; also after a failure)

`watch` reports in words as it goes (`on_update`), and both runners describe the
outcome the same way (`RunReport`: Jobs with their condition, tasks with their
exit codes and what they reported through the progress protocol), so `run-local`,
`smoke` and later commands (tune, notebook) print and judge runs alike. The live
table (`status_table`: state, restarts, time, progress per task) is the one run-local
redraws every few seconds and `tf-cluster status` prints for a release on a cluster.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..progress import TaskProgress

Say = Callable[[str], None]
Cancel = Callable[[], str]  # a reason to stop waiting, or "" to go on


@dataclass
class JobReport:
    name: str
    role: str
    condition: str  # Complete | Failed | "" (still running)
    reason: str = ""


@dataclass
class TaskReport:
    name: str  # <role>-<index>
    role: str
    index: int
    state: str  # pending | running | backoff | succeeded | failed | terminating
    restarts: int = 0
    exit_codes: list[int] = field(default_factory=list)
    seconds: float | None = None  # from its first start to its end (or now)
    reported: TaskProgress = field(default_factory=TaskProgress)
    detail: str = ""  # a word or two beside the state: Unschedulable, ContainerCreating, exit 3
    why: str = ""  # why it waits or failed, in a sentence (the scheduler's, the kubelet's, the Job's words)


@dataclass
class RunReport:
    where: str  # run directory, or namespace/release
    jobs: list[JobReport]
    tasks: list[TaskReport]
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.jobs) and all(j.condition == "Complete" for j in self.jobs)

    def failures(self) -> list[str]:
        return [
            f"{j.name}: {j.reason or j.condition or 'not finished'}" for j in self.jobs if j.condition != "Complete"
        ]

    def model_dir(self) -> str | None:
        return next((t.reported.result["model_dir"] for t in self.tasks if t.reported.result.get("model_dir")), None)

    def job_lines(self) -> list[str]:
        return [f"Job {j.name}: {j.condition or 'running'}" + (f" ({j.reason})" if j.reason else "") for j in self.jobs]

    def table(self) -> str:
        """Jobs, then one row per task: exit codes, restarts, time, what it reported."""
        rows = [("TASK", "EXIT CODES", "RESTARTS", "WALL", "RESULT")]
        for t in self.tasks:
            wall = f"{t.seconds:.1f}s" if t.seconds is not None else "-"
            rows.append((t.name, ",".join(map(str, t.exit_codes)) or "-", str(t.restarts), wall, t.reported.outcome()))
        return "\n".join(self.job_lines() + [""] + align(rows))

    def status(self) -> str:
        """The run as it goes: Jobs, the live table, then why tasks wait or failed."""
        why = [f"  {t.name}: {t.why}" for t in self.tasks if t.why]
        return "\n".join(self.job_lines() + ["", status_table(self.tasks)] + (["", "Why:", *why] if why else []))


def status_table(tasks: Sequence[TaskReport]) -> str:
    """One row per task: state, restarts, time, latest progress (epoch, loss, accuracy)."""
    rows = [("TASK", "STATE", "RESTARTS", "TIME", "PROGRESS")]
    for t in tasks:
        state = f"{t.state} ({t.detail})" if t.detail else t.state
        time = f"{t.seconds:5.1f}s" if t.seconds is not None else "-"
        rows.append((t.name, state, str(t.restarts), time, t.reported.summary()))
    return "\n".join(align(rows))


def align(rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell (the last column is left as it is)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows]


class Runner(ABC):
    """A release running somewhere (this machine, a cluster)."""

    where: str = ""

    @abstractmethod
    def start(self) -> None:
        """Launch every task of the release."""

    @abstractmethod
    def watch(self, timeout: float, on_update: Say = print, cancel: Cancel | None = None) -> RunReport:
        """Block until every Job is Complete or Failed (or `timeout` seconds passed: then stop
        what still runs and report it Failed); say what changes as it goes. `cancel`, asked every
        few seconds: when it returns a reason, stop waiting (a tuner pruned the run) and report
        the run as it stands (`stop` tears it down)."""

    @abstractmethod
    def report(self) -> RunReport:
        """The run as it stands now."""

    @abstractmethod
    def stop(self) -> None:
        """Tear everything down. Idempotent; safe after a failed start."""

    def run(self, timeout: float, on_update: Say = print) -> RunReport:
        """start, watch, stop: the whole run."""
        try:
            self.start()
            return self.watch(timeout, on_update)
        finally:
            self.stop()
