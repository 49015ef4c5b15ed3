"""Hyperparameter tuning: a study of trial releases.

Optuna does the search (TPE by default; random, grid, CMA-ES), stores the study (a SQLite file
by default, any SQLAlchemy URL for a team) and prunes hopeless trials (median rule). Each trial
is a whole tf-cluster release run through the runner seam: on this machine (`LocalRunner`) or
on a cluster through Helm (`ClusterRunner`, one release per trial, uninstalled when it ends).
A trial's values reach the program as `--name=value` arguments appended to `args`, or as chart
values (`valuesPath`). Its metric is read from what the program already emits: Vertex AI's
cloudml-hypertune reports (the launcher echoes them into the log), the progress protocol, or
Keras' own output. Optuna's storage is touched from one thread only: trials run in threads,
the study loop asks, reports, prunes and tells.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

import jsonschema
import yaml

from . import helm, roles
from .errors import TfClusterError, UsageError
from .runner import Runner, RunReport

Say = Callable[[str], None]

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["metric", "parameters", "maxTrials"],
    "properties": {
        "study": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 40},
        "metric": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "goal"],
            "properties": {"name": {"type": "string", "minLength": 1}, "goal": {"enum": ["maximize", "minimize"]}},
        },
        "parameters": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "type"],
                "properties": {
                    "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_-]*$"},
                    "type": {"enum": ["double", "int", "categorical", "discrete"]},
                    "min": {"type": "number"},
                    "max": {"type": "number"},
                    "scale": {"enum": ["linear", "log"]},
                    "values": {"type": "array"},
                    "valuesPath": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_]*(\\.[A-Za-z][A-Za-z0-9_]*)*$"},
                },
            },
        },
        "maxTrials": {"type": "integer", "minimum": 1},
        "parallelTrials": {"type": "integer", "minimum": 1},
        "algorithm": {"enum": ["tpe", "random", "grid", "cmaes"]},
        "pruner": {"enum": ["median", "none"]},
        "seed": {"type": "integer"},
        "trialTimeoutSeconds": {"type": "integer", "minimum": 1},
    },
}


class MetricDoc(TypedDict):
    name: str
    goal: str  # maximize | minimize


class _ParamDoc(TypedDict):
    name: str
    type: str  # double | int | categorical | discrete


class ParamDoc(_ParamDoc, total=False):
    """One entry of a space file's `parameters`, as SCHEMA lets it be."""

    min: float
    max: float
    scale: str  # linear | log
    values: list[Any]
    valuesPath: str


class _SpaceDoc(TypedDict):
    metric: MetricDoc
    parameters: list[ParamDoc]
    maxTrials: int


class SpaceDoc(_SpaceDoc, total=False):
    """A space file (docs/user-guide/tuning.md) as SCHEMA lets it be."""

    study: str
    parallelTrials: int
    algorithm: str  # tpe | random | grid | cmaes
    pruner: str  # median | none
    seed: int
    trialTimeoutSeconds: int


class SpaceError(UsageError):
    """A search-space file that cannot be used; the message names the field."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # double | int | categorical | discrete
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple = ()
    values_path: str = ""  # a chart value instead of a --name=value argument

    def suggest(self, trial):
        if self.type == "double":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log)
        if self.type == "int":
            return trial.suggest_int(self.name, int(self.low or 0), int(self.high or 0), log=self.log)
        return trial.suggest_categorical(self.name, list(self.choices))

    def grid(self) -> list:
        if self.type == "int":
            return list(range(int(self.low or 0), int(self.high or 0) + 1))
        return list(self.choices)


@dataclass(frozen=True)
class Space:
    path: Path
    study: str
    metric: str
    goal: str
    params: tuple[Param, ...]
    max_trials: int
    parallel: int = 1
    algorithm: str = "tpe"
    pruner: str = "median"
    seed: int | None = None
    trial_timeout: float = 1800


def load_space(path: Path) -> Space:
    """The space file, checked: every problem names its field and says what to do."""
    doc = read_space_doc(path)
    params: list[Param] = []
    seen: set[str] = set()
    for i, p in enumerate(doc["parameters"]):
        where = f"{path}: parameters[{i}] ({p['name']})"
        if p["name"] in seen:
            raise SpaceError(f"{where}: a second parameter with this name; names must be unique")
        seen.add(p["name"])
        param = range_param(p, where) if p["type"] in ("double", "int") else choice_param(p, where)
        params.append(replace(param, values_path=p["valuesPath"]) if p.get("valuesPath") else param)
    algorithm = doc.get("algorithm", "tpe")
    if algorithm == "grid":
        for i, param in enumerate(params):
            if param.type == "double":
                raise SpaceError(
                    f"{path}: parameters[{i}] ({param.name}): grid search needs finite values; "
                    "use type discrete with values, or another algorithm"
                )
    return Space(
        path=path,
        study=doc.get("study") or slug(path.stem),
        metric=doc["metric"]["name"],
        goal=doc["metric"]["goal"],
        params=tuple(params),
        max_trials=doc["maxTrials"],
        parallel=doc.get("parallelTrials", 1),
        algorithm=algorithm,
        pruner=doc.get("pruner", "median"),
        seed=doc.get("seed"),
        trial_timeout=float(doc.get("trialTimeoutSeconds", 1800)),
    )


def read_space_doc(path: Path) -> SpaceDoc:
    """The space file's YAML, valid against SCHEMA (the message names the field that is not)."""
    if not path.is_file():
        raise SpaceError(f"--space {path}: no such file")
    try:
        doc: SpaceDoc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise SpaceError(f"{path}: not readable YAML ({e})") from None
    try:
        jsonschema.validate(doc, SCHEMA)
    except jsonschema.ValidationError as e:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path).lstrip(".")
        raise SpaceError(f"{path}: {where or '(top level)'}: {e.message}") from None
    return doc


def range_param(p: ParamDoc, where: str) -> Param:
    """A double or int parameter: min below max, whole for int, positive for a log scale."""
    kind = p["type"]
    if "min" not in p or "max" not in p:
        raise SpaceError(f"{where}: type {kind} needs min and max")
    if p["min"] >= p["max"]:
        raise SpaceError(f"{where}: min {p['min']} is not below max {p['max']}; swap them")
    if p.get("scale") == "log" and p["min"] <= 0:
        raise SpaceError(f"{where}: scale log needs min > 0 (got {p['min']}); use scale linear or a min > 0")
    if kind == "int" and not (float(p["min"]).is_integer() and float(p["max"]).is_integer()):
        raise SpaceError(f"{where}: type int needs whole min and max")
    if "values" in p:
        raise SpaceError(f"{where}: values is for categorical/discrete; {kind} takes min and max")
    return Param(p["name"], kind, float(p["min"]), float(p["max"]), p.get("scale") == "log")


def choice_param(p: ParamDoc, where: str) -> Param:
    """A categorical or discrete parameter: distinct values, numbers for discrete."""
    kind = p["type"]
    values = p.get("values") or []
    if not values:
        raise SpaceError(f"{where}: type {kind} needs a non-empty values list")
    if kind == "discrete" and not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise SpaceError(f"{where}: discrete values must be numbers (use categorical for others)")
    if len(set(map(json.dumps, values))) != len(values):
        raise SpaceError(f"{where}: values has duplicates")
    if "min" in p or "max" in p or "scale" in p:
        raise SpaceError(f"{where}: min/max/scale are for double and int; {kind} takes values")
    return Param(p["name"], kind, choices=tuple(values), values_path="")


def slug(text: str) -> str:
    out = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    return out[:40] or "study"


# ------------------------------------------------------------------ Optuna
def sampler(space: Space):
    import optuna

    if space.algorithm == "random":
        return optuna.samplers.RandomSampler(seed=space.seed)
    if space.algorithm == "grid":

        class Grid(optuna.samplers.GridSampler):
            """The grid without its `study.stop()` once every point was tried: that works only inside
            `study.optimize`; here the study loop stops at maxTrials (capped at the grid's size)."""

            def after_trial(self, study, trial, state, values) -> None:
                pass

        return Grid({p.name: p.grid() for p in space.params}, seed=space.seed)
    if space.algorithm == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=space.seed)
    return optuna.samplers.TPESampler(seed=space.seed)


def pruner(space: Space):
    import optuna

    if space.pruner == "none":
        return optuna.pruners.NopPruner()
    # Steps are epochs counted from 1 (Keras' lines, the progress protocol): a trial's first report is
    # never judged (warm-up below step 2), and no trial is pruned before two have finished.
    return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=2)


def storage_url(out: Path, url: str | None) -> str:
    return url or f"sqlite:///{(out / 'study.db').resolve()}"


def quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def open_study(space: Space, url: str, *, resume: bool, say: Say):
    """Create the study, or with `resume` load it: trials the tuner left running (it was killed)
    are marked FAIL (interrupted) and their parameters queued again; finished ones are kept."""
    import optuna
    from optuna.trial import TrialState

    quiet_optuna()
    names = optuna.get_all_study_names(url)
    if space.study in names and not resume:
        raise UsageError(
            f"study {space.study!r} already exists in {url}: add --resume to continue it, or give the space "
            "file another `study` name"
        )
    if space.study not in names and resume:
        raise UsageError(f"--resume: no study {space.study!r} in {url} (studies there: {', '.join(names) or 'none'})")
    study = optuna.create_study(
        study_name=space.study,
        storage=url,
        direction=space.goal,  # "minimize" or "maximize": checked by the schema
        sampler=sampler(space),
        pruner=pruner(space),
        load_if_exists=resume,
    )
    if not resume:
        study.set_user_attr("metric", space.metric)
        study.set_user_attr("space", str(space.path))
        return study
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(t.number, state=TrialState.FAIL)
        study.enqueue_trial(t.params, user_attrs={"rerun_of": t.number})
        interrupted(study, t.number)
        say(f"trial {t.number} was running when the tuner stopped: marked interrupted, its values queued again")
    return study


INTERRUPTED = "interrupted"


def interrupted(study, number: int) -> None:
    """Remember (on the study: a finished trial takes no attrs) that a trial did not finish because
    the tuner stopped; it does not count towards maxTrials."""
    marked = set(study.user_attrs.get(INTERRUPTED, []))
    study.set_user_attr(INTERRUPTED, sorted(marked | {number}))


def counted(study) -> list:
    """Finished trials that count towards maxTrials (complete, pruned, failed; not interrupted)."""
    from optuna.trial import TrialState

    skip = set(study.user_attrs.get(INTERRUPTED, []))
    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return [t for t in study.get_trials(deepcopy=False, states=done) if t.number not in skip]


# ------------------------------------------------------------------ one trial
def leader_first(report: RunReport) -> list:
    """The run's tasks in the role table's order (chief, worker, ...): the leading task first."""
    return sorted(report.tasks, key=lambda t: (roles.order(t.role), t.index))


def metric_of(report: RunReport, name: str) -> tuple[float | None, int | None]:
    """The metric's latest value and step, from the leading task first: the hypertune reports,
    the protocol's RESULT, then its progress (the chart's trainers, Keras' own lines)."""
    for t in leader_first(report):
        files, result, prog = t.reported.files, t.reported.result, t.reported.progress  # each read once
        if name in files:
            step = files.get("step")
            return files[name], int(step) if step is not None else None
        if name in result:
            return float(result[name]), None
        if name in prog:
            epoch = prog.get("epoch")
            return float(prog[name]), int(epoch) if epoch is not None else None
    return None, None


def metric_series(report: RunReport, name: str) -> dict[int, float]:
    """The metric along the way ({step: value}), from the leading task first: its hypertune
    reports, else its progress (per epoch)."""
    for t in leader_first(report):
        for series in (t.reported.reports, t.reported.history):
            if series.get(name):
                return series[name]
    return {}


@dataclass
class TrialRun:
    """A trial's release running in a thread; the study loop reads it and may cancel it."""

    number: int
    trial: Any  # optuna.Trial
    params: dict
    runner: Runner
    timeout: float
    started: float = field(default_factory=time.monotonic)
    cancel_reason: str = ""
    report: RunReport | None = None
    error: str = ""
    captured: str = ""  # what went wrong, read before the release is torn down
    last_report: RunReport | None = None  # the study loop's latest look (the live table shows it)
    last_step: int = -1
    thread: threading.Thread | None = None

    def go(self) -> None:
        self.thread = threading.Thread(target=self._run, name=f"trial-{self.number}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.runner.start()
            self.report = self.runner.watch(self.timeout, on_update=lambda _s: None, cancel=lambda: self.cancel_reason)
        except TfClusterError as e:
            self.error = str(e)
        except Exception as e:  # noqa: BLE001 - a trial's failure is the trial's, the study goes on
            self.error = f"{type(e).__name__}: {e}"
        finally:
            if (self.error or (self.report and not self.report.ok)) and hasattr(self.runner, "diagnostics"):
                try:
                    self.captured = self.runner.diagnostics()
                except Exception:  # noqa: BLE001 - best effort
                    pass
            try:
                self.runner.stop()
            except Exception as e:  # noqa: BLE001
                self.error = self.error or f"could not tear the trial down: {e}"

    @property
    def done(self) -> bool:
        return self.thread is not None and not self.thread.is_alive()

    def seconds(self) -> float:
        return time.monotonic() - self.started


def unaccepted_argument(text: str) -> str:
    """`--foo=1` when a program's argparse refused it (`error: unrecognized arguments: --foo=1`)."""
    for line in text.splitlines():
        if "unrecognized arguments:" in line:
            return line.split("unrecognized arguments:", 1)[1].strip()
    return ""


# ------------------------------------------------------------------ the study
@dataclass
class Backend:
    """Where trials run: makes the runner for one trial's values and names its release."""

    make: Callable[[str, helm.Values, int], Runner]
    tasks_per_trial: int
    local: bool
    logs: Callable[[TrialRun], str] = lambda run: run.captured  # task logs (to tell a refused argument)
    cleanup: Callable[[str], None] = lambda release: None  # remove a release a killed tuner left
    helm_major: str = "4"


def trial_values(space: Space, base_args: dict[str, list[str]], params: dict, release: str = "") -> helm.Values:
    """The trial's settings on top of the base values: `--name=value` appended to `args` (and to
    every role's own `args`), `valuesPath` parameters as chart values; with a release, object
    names follow it (a base `fullnameOverride` would give every trial the same Jobs)."""
    flags = [f"--{p.name}={params[p.name]}" for p in space.params if not p.values_path]
    set_json = [f"{path}={json.dumps([*args, *flags])}" for path, args in base_args.items()]
    set_json += [f"{p.values_path}={json.dumps(params[p.name])}" for p in space.params if p.values_path]
    if release:
        set_json.append(f"fullnameOverride={json.dumps(release)}")
    return helm.Values(set_json=tuple(set_json))


def base_args(user_values: dict) -> dict[str, list[str]]:
    """Where the trial flags go: `args`, and each role's own `args` when it sets them."""
    out = {"args": list(user_values.get("args") or [])}
    for role, settings in (user_values.get("roles") or {}).items():
        if isinstance(settings, dict) and settings.get("args"):
            out[f"roles.{role}.args"] = list(settings["args"])
    return out


def release_name(study: str, number: int) -> str:
    return f"{study[:40]}-t{number}"


def run_study(space: Space, base: helm.Values, backend: Backend, study, *, say: Say, poll: float | None = None):
    """Run trials until maxTrials count, `parallel` at once; return the study. Looks at running
    trials every `poll` s (1 locally; 3 on a cluster, where a look reads pod logs)."""
    poll = poll or (1.0 if backend.local else 3.0)

    user = helm.Helm(backend.helm_major).user_values(base)
    args_at = base_args(user)
    space, parallel = fit_space(space, backend, say)
    for number in study.user_attrs.get(INTERRUPTED, []):
        backend.cleanup(release_name(space.study, number))
    running: dict[int, TrialRun] = {}
    shown = ""
    try:
        while True:
            finished = len(counted(study))
            if finished + len(running) < space.max_trials and len(running) < parallel:
                start_trial(study, space, base, args_at, backend, say, running)
                continue
            if not running:
                break
            for number, run in list(running.items()):
                if run.done:
                    del running[number]
                    finish(study, space, run, backend, say)
                    continue
                look_at(run, space, say)
            table = live_table(study, space, running)
            if table != shown:
                say(table)
                shown = table
            time.sleep(poll)
    except BaseException as e:  # Ctrl-C, or an error: no trial is left running, none is lost
        stop_trials(study, space, running, backend, say, e)
        raise
    return study


def fit_space(space: Space, backend: Backend, say: Say) -> tuple[Space, int]:
    """The space and the trials run at once, cut to what there is: a grid's points (maxTrials), this
    machine's cores (parallelTrials, local trials)."""
    parallel = space.parallel
    if space.algorithm == "grid":
        points = 1
        for p in space.params:
            points *= len(p.grid())
        if points < space.max_trials:
            say(f"maxTrials {space.max_trials}: the grid has {points} points; running {points}")
            space = replace(space, max_trials=points)
    if backend.local:
        room = max(1, (os.cpu_count() or 1) // max(1, backend.tasks_per_trial))
        if parallel > room:
            say(
                f"parallelTrials {parallel}: this machine holds {room} at once ({os.cpu_count()} cores, "
                f"{backend.tasks_per_trial} task(s) per trial); running {room}"
            )
            parallel = room
    return space, parallel


def start_trial(
    study,
    space: Space,
    base: helm.Values,
    args_at: dict[str, list[str]],
    backend: Backend,
    say: Say,
    running: dict[int, TrialRun],
) -> None:
    """Ask the study for the next trial and start its release in a thread, counted in `running`
    before it starts (a stop from here on finds it); a release the chart refuses fails the trial
    and stops the study (the space needs fixing)."""
    from optuna.trial import TrialState

    trial = study.ask()
    params = {p.name: p.suggest(trial) for p in space.params}
    release = release_name(space.study, trial.number)
    values = base.plus(trial_values(space, args_at, params, release))
    try:
        runner = backend.make(release, values, trial.number)
    except TfClusterError as e:  # e.g. a valuesPath value the chart refuses
        trial.set_user_attr("reason", str(e)[:500])
        study.tell(trial, state=TrialState.FAIL)
        raise SpaceError(
            f"{space.path}: trial {trial.number} ({fmt_params(params)}) cannot start: {e}. "
            "The study is kept; fix the space and continue with --resume"
        ) from None
    run = TrialRun(trial.number, trial, params, runner, space.trial_timeout)
    running[trial.number] = run
    say(f"trial {trial.number} started: {fmt_params(params)}")
    run.go()


def look_at(run: TrialRun, space: Space, say: Say) -> None:
    """Read a running trial's report, tell the study every step reported since the last look (so
    trials line up), and cancel the trial when the pruner says it trails."""
    if run.cancel_reason:
        return
    try:
        run.last_report = run.runner.report()
    except Exception:  # noqa: BLE001 - a report that failed now (API hiccup) is read next time
        return
    new = [(s, v) for s, v in sorted(metric_series(run.last_report, space.metric).items())]
    new = [(s, v) for s, v in new if s > run.last_step]
    for step, value in new:  # every step reported since the last look, so trials line up
        run.trial.report(value, step)
        run.last_step = step
    if new and run.trial.should_prune():
        step, value = new[-1]
        run.cancel_reason = f"pruned by the tuner at step {step} ({space.metric} {value:g})"
        say(f"trial {run.number} pruned at step {step}: {space.metric} {value:g} trails the median")


def stop_trials(
    study, space: Space, running: dict[int, TrialRun], backend: Backend, say: Say, error: BaseException
) -> None:
    """The tuner stops (Ctrl-C, or an error): the trials that finished are told, the others
    cancelled, failed and queued again for --resume: none is left running, none is lost."""
    from optuna.trial import TrialState

    for number, run in list(running.items()):
        if run.done:  # finished before the stop: told as it ended
            del running[number]
            try:
                finish(study, space, run, backend, say)
            except SpaceError:
                pass
    why = "the tuner was interrupted" if isinstance(error, KeyboardInterrupt) else f"the tuner stopped: {error}"
    for run in running.values():
        run.cancel_reason = why
    for run in running.values():
        if run.thread:
            run.thread.join()
        study.tell(run.trial, state=TrialState.FAIL)
        study.enqueue_trial(run.params, user_attrs={"rerun_of": run.number})
        interrupted(study, run.number)
    if running:
        say(f"{why}: {len(running)} running trial(s) stopped and queued again; continue with --resume")


def finish(study, space: Space, run: TrialRun, backend: Backend, say: Say) -> None:
    from optuna.trial import TrialState

    report = run.report
    value = metric_of(report, space.metric)[0] if report else None
    trial = run.trial
    if report is not None:  # the steps it reported after the last look: later trials are compared with them
        for step, reported in sorted(metric_series(report, space.metric).items()):
            if step > run.last_step:
                trial.report(reported, step)
                run.last_step = step
    if run.cancel_reason.startswith("pruned"):
        trial.set_user_attr("reason", run.cancel_reason)
        study.tell(trial, state=TrialState.PRUNED)
        say(f"trial {run.number} PRUNED after {run.seconds():.0f}s ({run.cancel_reason})")
        return
    if report is not None and report.ok and value is not None:
        trial.set_user_attr("seconds", round(run.seconds(), 1))
        study.tell(trial, value)
        say(f"trial {run.number} COMPLETE: {space.metric} {value:g} in {run.seconds():.0f}s")
        return
    if run.error:
        reason = run.error
    elif report is not None and not report.ok:
        reason = "; ".join(report.failures())
    else:
        reason = (
            f"the run completed but never reported {space.metric!r}: report it with cloudml-hypertune "
            f"(report_hyperparameter_tuning_metric(hyperparameter_metric_tag={space.metric!r}, ...)), the progress "
            "protocol, or Keras' own output"
        )
    refused = unaccepted_argument(backend.logs(run)) if report is None or not report.ok else ""
    trial.set_user_attr("reason", reason[:500])
    study.tell(trial, state=TrialState.FAIL)
    say(f"trial {run.number} FAILED after {run.seconds():.0f}s: {reason}")
    if refused:
        raise SpaceError(
            f"{space.path}: the program does not accept {refused} (argparse: unrecognized arguments). Rename "
            "the parameter to one of its options, or give it a valuesPath. The study is kept; fix the space and "
            "continue with --resume"
        )


def fmt_params(params: dict) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def rows(study, space: Space, running: dict[int, TrialRun] | None = None, *, best_first: bool = False) -> list[tuple]:
    skip = set(study.user_attrs.get(INTERRUPTED, []))
    out = []
    for t in study.get_trials(deepcopy=False):
        run = (running or {}).get(t.number)
        if t.state.name == "WAITING":
            continue
        state = "INTERRUPTED" if t.number in skip else t.state.name
        value = t.value
        if run is not None and value is None and run.last_report is not None:
            value = metric_of(run.last_report, space.metric)[0]
        seconds = run.seconds() if run is not None else t.user_attrs.get("seconds")
        if seconds is None and t.datetime_complete and t.datetime_start:
            seconds = (t.datetime_complete - t.datetime_start).total_seconds()
        out.append((t.number, fmt_params(t.params), state, value, seconds))
    if best_first:
        sign = -1 if space.goal == "maximize" else 1
        out.sort(key=lambda r: (r[2] != "COMPLETE", sign * r[3] if r[3] is not None else 0, r[0]))
    return out


def table(study, space: Space, running: dict[int, TrialRun] | None = None, *, best_first: bool = False) -> str:
    from .runner import align

    lines = [("TRIAL", "STATE", space.metric.upper(), "TIME", "PARAMS")]
    for number, params, state, value, seconds in rows(study, space, running, best_first=best_first):
        lines.append(
            (
                str(number),
                state,
                f"{value:.4f}" if value is not None else "-",
                f"{seconds:.0f}s" if seconds is not None else "-",
                params,
            )
        )
    return "\n".join(align(lines))


def live_table(study, space: Space, running: dict[int, TrialRun]) -> str:
    done = len(counted(study))
    return f"\n{space.study}: {done}/{space.max_trials} trials finished, {len(running)} running\n" + table(
        study, space, running
    )


# ------------------------------------------------------------------ results
def best_values(study, space: Space, base: helm.Values, major: str = "4") -> dict:
    """The values the best trial ran with, whole (the base files, --script, the trial's settings):
    ready for `helm install -f`."""
    best = study.best_trial
    h = helm.Helm(major)
    return h.user_values(base.plus(trial_values(space, base_args(h.user_values(base)), best.params)))


def write_results(study, space: Space, base: helm.Values, out: Path, say: Say, major: str = "4") -> list[Path]:
    """best-values.yaml and the plots; returns what was written."""
    written: list[Path] = []
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if not complete:
        say("no trial completed: no best values, no plots")
        return written
    best = study.best_trial
    path = out / "best-values.yaml"
    header = (
        f"# Best trial {best.number} of study {space.study}: {space.metric} {best.value:g} ({space.goal})\n"
        f"# Parameters: {fmt_params(best.params)}\n"
        f'# Install: helm install NAME "$(tf-cluster chart path)" -f {path.name}\n'
    )
    path.write_text(header + yaml.dump(best_values(study, space, base, major), Dumper=BlockDumper, sort_keys=False))
    written.append(path)
    written += plots(study, out / "plots", say)
    return written


class BlockDumper(yaml.SafeDumper):
    """Multi-line strings (a --script program in code.files) as readable `|` blocks."""


BlockDumper.add_representer(
    str,
    lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None),
)


def plots(study, folder: Path, say: Say) -> list[Path]:
    """Optuna's matplotlib visualisations as PNG files."""
    import warnings

    import matplotlib
    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as vis

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, fn in (
        ("optimization-history", vis.plot_optimization_history),
        ("param-importances", vis.plot_param_importances),
        ("parallel-coordinate", vis.plot_parallel_coordinate),
    ):
        try:
            ax: Any = fn(study)
            fig: Any = ax.figure if hasattr(ax, "figure") else ax[0].figure
            fig.set_size_inches(8, 5)
            fig.tight_layout()
            path = folder / f"{name}.png"
            fig.savefig(path, dpi=80)
            plt.close(fig)
            out.append(path)
        except Exception as e:  # noqa: BLE001 - a plot Optuna cannot draw (e.g. importances of one trial)
            say(f"plot {name} skipped: {e}")
    return out


def local_logs(run: TrialRun) -> str:
    """A local trial's task logs (its run folder)."""
    folder = Path(run.runner.where) / "logs"
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.glob("*.log"))) if folder.is_dir() else ""
