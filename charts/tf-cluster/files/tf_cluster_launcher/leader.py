"""Following the leading Job (chief, else worker) or the interactive coordinator's heartbeat: how the
run ended, as the tasks that stop with it read it."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any, Callable

from .common import (
    ABANDONED,
    EXIT_LEADER_FAILED,
    FAILURE,
    GONE,
    STARTED,
    SUCCESS,
    UNWATCHABLE,
    ConfigError,
    env,
    env_seconds,
    log,
)
from .events import EVENTS
from .informer import Informer
from .kubeapi import api

if TYPE_CHECKING:
    import threading

# Seconds a watched leading Job may be absent before a follower calls it gone: Helm and Argo CD
# create a release's Jobs within a second of each other, so a pod never starts long before it.
LEADER_MISSING_SECONDS = env_seconds("TF_CLUSTER_LEADER_MISSING_SECONDS", 60)


def leader_condition_from_api(namespace: str, job: str) -> str:
    """The leading Job's finished condition type ("Complete", "Failed", ...) or ""."""
    status = api("/apis/batch/v1/namespaces/%s/jobs/%s" % (namespace, job)).get("status", {})
    return condition_of(status)


def parse_time(text: str | None) -> float | None:
    """An RFC 3339 time of the API (renewTime: 2026-11-24T10:00:00.123456Z) as epoch seconds."""
    if not text:
        return None
    import calendar

    base, _, frac = text.rstrip("Z").partition(".")
    try:
        seconds = calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    return seconds + (float("0." + frac) if frac.isdigit() else 0.0)


def heartbeat_condition(
    data: dict[str, Any] | None, started: float, now: float, start_timeout: float, heartbeat_timeout: float
) -> str:
    """What an interactive coordinator's heartbeat (its ConfigMap's data: holderIdentity,
    renewTime, done) says to a server started at `started`: "Complete" once the kernel marked it
    done, ABANDONED when no kernel renewed it for heartbeat_timeout seconds (start_timeout from
    `started` while none has since), else ""."""
    data = data or {}
    if data.get("done"):
        return "Complete"
    renewed = parse_time(data.get("renewTime"))
    if renewed is not None and renewed >= started:
        return ABANDONED if now - renewed > heartbeat_timeout else ""
    if renewed is not None and now - renewed <= heartbeat_timeout:
        return ""  # a kernel renewed it shortly before this task started: it is alive
    return ABANDONED if now - started > start_timeout else ""


def leader_condition_from_heartbeat(namespace: str, name: str) -> str:
    try:
        data = api("/api/v1/namespaces/%s/configmaps/%s" % (namespace, name)).get("data")
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        data = None  # not created yet: no kernel has connected
    start_timeout = float(env("TF_CLUSTER_START_TIMEOUT", "3600"))
    heartbeat_timeout = float(env("TF_CLUSTER_HEARTBEAT_TIMEOUT", "300"))
    cond = heartbeat_condition(data, STARTED, time.time(), start_timeout, heartbeat_timeout)
    if cond == ABANDONED:
        renewed = parse_time((data or {}).get("renewTime"))
        if renewed is not None and renewed >= STARTED:
            log(
                "the notebook kernel (the coordinator) has not renewed its heartbeat (ConfigMap %s) for "
                "%.0fs (limit %.0fs): it died, was culled or restarted without reconnecting"
                % (name, time.time() - renewed, heartbeat_timeout)
            )
        else:
            log(
                "no notebook kernel connected as coordinator (ConfigMap %s) within %.0fs of this task's start"
                % (name, start_timeout)
            )
    return cond


def condition_of(status: dict[str, Any]) -> str:
    """Pick the decisive condition by type (never by position: 1.31+ adds SuccessCriteriaMet)."""
    true_types = [c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"]
    for t in FAILURE:
        if t in true_types:
            return "Failed"
    for t in SUCCESS:
        if t in true_types:
            return "Complete"
    return ""


def leader_condition() -> str:
    path = env("TF_CLUSTER_LEADER_STATUS_FILE")
    if path:
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return ""
    if env("TF_CLUSTER_HEARTBEAT"):
        return leader_condition_from_heartbeat(env("TF_CLUSTER_NAMESPACE", "default"), env("TF_CLUSTER_HEARTBEAT"))
    return leader_condition_from_api(env("TF_CLUSTER_NAMESPACE", "default"), env("TF_CLUSTER_LEADER_JOB"))


def leader_name() -> str:
    """What this task watches, for the log: the leading Job, or the interactive coordinator's heartbeat."""
    if env("TF_CLUSTER_HEARTBEAT"):
        return "the notebook coordinator (ConfigMap %s)" % env("TF_CLUSTER_HEARTBEAT")
    return "Job %s" % (env("TF_CLUSTER_LEADER_JOB") or "leader")


def say_unwatchable(what: str, reason: str) -> None:
    log(
        "cannot read %s (%s): this task could never stop with it. The launcher's Role must allow get, "
        "list and watch on it to this pod's ServiceAccount: keep the chart's rbac.create=true, or grant "
        "them yourself" % (what, reason)
    )


def leader_condition_at_start() -> str:
    """leader_condition() as a task starts: UNWATCHABLE (said) when the API refuses this token,
    "" when it cannot be read now (the watch retries)."""
    try:
        return leader_condition()
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            say_unwatchable(leader_name(), "%s %s" % (e.code, e.reason))
            return UNWATCHABLE
        return ""
    except (ConfigError, urllib.error.URLError, OSError, ValueError):
        return ""


def leader_condition_or_empty() -> str:
    """leader_condition(), with "" when the API cannot be read (the caller moves on)."""
    try:
        return leader_condition()
    except (ConfigError, urllib.error.URLError, OSError, ValueError):
        return ""


def watch_leader(poll: float, on_finished: Callable[[str], None], stop_event: threading.Event) -> None:
    """Call on_finished(condition) once the leader has finished. The leading Job is watched (one
    LIST, then one WATCH request per 10-20 minutes: no quorum read every `poll` seconds by every
    server task); the notebook coordinator's heartbeat and run-local's status file are read every
    `poll` seconds (their timeouts need the clock; a notebook release has few servers)."""
    job = leader_name()
    if env("TF_CLUSTER_HEARTBEAT"):
        log(
            "will stop when %s says done, or after %ss without its heartbeat (%ss until a kernel first "
            "connects); checked every %ss"
            % (job, env("TF_CLUSTER_HEARTBEAT_TIMEOUT", "300"), env("TF_CLUSTER_START_TIMEOUT", "3600"), poll)
        )
    elif not env("TF_CLUSTER_LEADER_STATUS_FILE"):
        return watch_leader_job(on_finished, stop_event)
    else:
        log("will stop when %s finishes (checked every %ss)" % (job, poll))
    errors = 0
    while not stop_event.wait(poll):
        try:
            cond = leader_condition()
            errors = 0
        except urllib.error.HTTPError as e:
            if e.code in (401, 403):
                say_unwatchable(job, "%s %s" % (e.code, e.reason))
                on_finished(UNWATCHABLE)
                return
            errors += 1
            if errors == 1 or errors % 12 == 0:
                log("cannot read %s yet (%s); retrying" % (job, e))
            continue
        except (urllib.error.URLError, OSError, ValueError) as e:
            errors += 1
            if errors == 1 or errors % 12 == 0:
                log("cannot read %s yet (%s); retrying" % (job, e))
            continue
        if cond:
            log("%s is %s" % (job, cond))
            on_finished(cond)
            return


def leader_outcome(current: list[dict[str, Any]], deleted: dict[str, dict[str, Any]], absent_for: float | None) -> str:
    """What a follower makes of its leading Job as its watch keeps it: "Complete" or "Failed" once
    it finished (read from its last state too when it was deleted: a Job removed right after it
    finished still says how it ended), GONE once no Job of that name has existed for
    LEADER_MISSING_SECONDS (`absent_for`, None while one does: deleted before it finished, or never
    created, so this run cannot end), else "" (running)."""
    for job in current or list(deleted.values()):
        cond = condition_of(job.get("status") or {})
        if cond:
            return cond
    if not current and absent_for is not None and absent_for >= LEADER_MISSING_SECONDS:
        return GONE
    return ""


def watch_leader_job(on_finished: Callable[[str], None], stop_event: threading.Event) -> None:
    name = env("TF_CLUSTER_LEADER_JOB")
    jobs = Informer(
        "/apis/batch/v1/namespaces/%s/jobs" % env("TF_CLUSTER_NAMESPACE", "default"),
        field_selector="metadata.name=%s" % name,
        name="Job %s" % name,
        remember_deleted=True,
    ).start()
    log("will stop when Job %s finishes (watched)" % name)
    absent_since: float | None = None
    try:
        while not stop_event.is_set():
            if jobs.forbidden:
                say_unwatchable("Job %s" % name, jobs.forbidden)
                on_finished(UNWATCHABLE)
                return
            current = jobs.snapshot()
            if current or not jobs.synced.is_set():
                absent_since = None
            elif absent_since is None:
                absent_since = time.monotonic()
            cond = leader_outcome(
                current, jobs.gone(), None if absent_since is None else time.monotonic() - absent_since
            )
            if cond == GONE:
                log(
                    "Job %s %s (no Job of that name for %ds)"
                    % (
                        name,
                        "was deleted before it finished" if jobs.gone() else "does not exist",
                        LEADER_MISSING_SECONDS,
                    )
                )
                on_finished(cond)
                return
            if cond:
                log("Job %s is %s" % (name, cond))
                on_finished(cond)
                return
            jobs.wait_for_change(1.0)
    finally:
        jobs.stop()


def record_leader_event(cond: str, already: bool) -> None:
    """The Event of a task stopped because its leading Job ended as `cond` (none when it had ended
    before this task started, `already`, except that it is gone)."""
    what = leader_name()
    if cond == GONE:
        EVENTS.record(
            "LeaderGone", "%s no longer exists: task stopped (exit %d)" % (what, EXIT_LEADER_FAILED), warning=True
        )
    elif not already and cond in ("Complete", "Failed"):
        EVENTS.record(
            "StoppedWithLeader",
            "%s is %s: task stopped (exit %d)" % (what, cond, 0 if cond == "Complete" else EXIT_LEADER_FAILED),
            warning=cond == "Failed",
        )
