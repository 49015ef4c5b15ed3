"""Every task's log of a release in one stream, each line under its task as run-local prints it
(`[worker-1] epoch 2/5  loss 0.4100`): `tf-cluster logs`.

Once (`merged`): every pod of the release's Jobs (a replaced task's earlier pods too) read with
the kubelet's timestamps and merged in time order. Following (`Follower`): one thread per pod
streams its log as it is written; the pods are listed again every few seconds, so a replacement
created after a failure (or a task that starts late) joins, until every Job is finished and every
stream has ended.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from . import cluster_state, kube, progress
from .errors import TfClusterError, UsageError

CONTAINER = "tensorflow"  # the chart's training container (the launcher and the program)
LIST_TRIES = 5  # a follower gives up after this many failed listings in a row


def task_name(pod) -> str:
    role, index = cluster_state.task_of(pod)
    return f"{role}-{index}"


def display(line: str) -> str | None:
    """An output line as run-local and `tf-cluster logs` show it: a progress message in words, a
    line redrawn in place (Keras' bar) as its last state; None for a redraw that erases itself."""
    msg = progress.parse(line)
    text = msg.describe() if msg else progress.fold(line)
    return None if line.strip() and not text.strip() else text


def shown(task: str, line: str, raw: bool = False) -> str | None:
    """A log line under its task: `[worker-1] ...`, shaped as run-local shows it (`display`)
    unless `raw`; None for a line that shows nothing (a progress bar redraw that erases itself)."""
    line = line.rstrip("\n")
    text = line if raw else display(line)
    return None if text is None else f"[{task}] {text}"


def started(pod) -> bool:
    """Has the pod's training container a log to read (running, or ended)?"""
    for cs in (pod.status and pod.status.container_statuses) or []:
        if cs.name == CONTAINER and cs.state and (cs.state.running or cs.state.terminated):
            return True
    return False


def merged(logs: Iterable[tuple[str, str]], raw: bool = False) -> list[str]:
    """Lines of several logs read with the kubelet's timestamps (`2026-01-02T03:04:05.123456789Z text`),
    given as (task, log text), in time order under their tasks (one log's lines keep their order; a
    line without a timestamp goes with the line before it)."""
    entries: list[tuple[float, int, int, str]] = []
    for n, (task, text) in enumerate(logs):
        at = 0.0
        for i, line in enumerate(text.removesuffix("\n").split("\n") if text else []):  # not at \r: bars fold
            stamp, _, rest = line.partition(" ")
            try:
                at = kube.kubelet_time(stamp)
            except ValueError:
                rest = line
            out = shown(task, rest, raw)
            if out is not None:
                entries.append((at, n, i, out))
    return [out for *_, out in sorted(entries)]


def lines_of(chunks: Iterable[bytes]) -> Iterator[str]:
    """Text lines of a byte stream (a followed log), the last one even without its newline."""
    rest = b""
    for chunk in chunks:
        rest += chunk
        *whole, rest = rest.split(b"\n")
        for line in whole:
            yield line.decode(errors="replace")
    if rest:
        yield rest.decode(errors="replace")


Lister = Callable[[], tuple[list, bool]]  # -> (the release's pods, whether every Job has finished)
Opener = Callable[[object, bool], Iterable[str]]  # (pod, first listing?) -> its log's lines as they come


@dataclass
class Follower:
    """Streams every pod's log concurrently until the release is done (`run`). `list_pods` gives
    the pods to follow and whether every Job has finished; `open_log` a pod's lines as they are
    written (the first listing's pods with `--since` applied); `say` prints one line (called from
    several threads, one at a time); `note` what the user should know (a log that could not be read)."""

    list_pods: Lister
    open_log: Opener
    say: Callable[[str], None]
    note: Callable[[str], None]
    raw: bool = False
    relist: float = 2.0
    _threads: dict[str, threading.Thread] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        first, failures = True, 0
        while True:
            try:
                pods, finished = self.list_pods()
                failures = 0
            except Exception as e:  # noqa: BLE001 - the API server briefly away: the streams go on
                failures += 1
                if failures >= LIST_TRIES:
                    raise TfClusterError(f"cannot list the release's pods: {e}") from e
                self.note(f"cannot list the release's pods ({e}); trying again in {self.relist:.0f}s")
                time.sleep(self.relist)
                continue
            for pod in pods:
                uid = pod.metadata.uid or pod.metadata.name
                if uid not in self._threads and started(pod):
                    t = threading.Thread(target=self._pump, args=(pod, first), daemon=True, name=f"log {uid}")
                    self._threads[uid] = t
                    t.start()
            first = False
            alive = [t for t in self._threads.values() if t.is_alive()]
            if finished and not alive:
                return
            time.sleep(self.relist)

    def _pump(self, pod, first: bool) -> None:
        task = task_name(pod)
        try:
            for line in self.open_log(pod, first):
                out = shown(task, line, self.raw)
                if out is not None:
                    with self._lock:
                        self.say(out)
        except Exception as e:  # noqa: BLE001 - one pod's log failing must not end the others
            with self._lock:
                self.note(f"[{task}] log of pod {pod.metadata.name} ended: {e}")


def seconds(text: str) -> int:
    """A duration as kubectl's --since takes it (`30s`, `5m`, `1h30m`, `2h`) in seconds."""
    parts = re.findall(r"(\d+)([hms])", text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise UsageError(f"--since {text}: a duration such as 30s, 5m, 1h or 1h30m")
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def of_roles(snap: cluster_state.Snapshot, roles: Iterable[str] = ()) -> list:
    """The snapshot's pods (of `roles`, if given), oldest first."""
    wanted = set(roles)
    pods = [p for p in snap.pods if not wanted or cluster_state.task_of(p)[0] in wanted]
    return sorted(pods, key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))


def pods_of(api, namespace: str, release: str, roles: Iterable[str] = ()) -> tuple[list, bool]:
    """The release's Job pods (of `roles`, if given), oldest first, and whether every Job has
    finished (also when the release has no Job left: it was uninstalled)."""
    snap = kube.snapshot(api, namespace, release)
    return of_roles(snap, roles), snap.finished() or not snap.jobs


def read_log(api, namespace: str, pod, since_seconds: int | None) -> str:
    """A pod's whole log with the kubelet's timestamps (merged() orders them)."""
    from kubernetes import client

    return client.CoreV1Api(api).read_namespaced_pod_log(
        pod.metadata.name, namespace, container=CONTAINER, timestamps=True, since_seconds=since_seconds
    )


def stream_log(api, namespace: str, pod, since_seconds: int | None) -> Iterator[str]:
    """A pod's log line by line as it is written, until its container ends."""
    from kubernetes import client

    resp = client.CoreV1Api(api).read_namespaced_pod_log(
        pod.metadata.name,
        namespace,
        container=CONTAINER,
        follow=True,
        since_seconds=since_seconds,
        _preload_content=False,
    )
    try:
        yield from lines_of(resp.stream(4096, decode_content=True))
    finally:
        resp.release_conn()
