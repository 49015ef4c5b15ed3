"""A collection's objects kept current (LIST, then WATCH, again after each end), and the API server's
clock offset."""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable

from .common import ConfigError, log
from .kubeapi import WatchExpired, api, api_watch, socket_of

# One WATCH request lasts this long (randomized, as client-go's reflector does, so that the tasks of
# a large release do not all come back at once); a task's steady state is a request per 10-20 min
# and watch (the ParameterServer's servers watch the leading Job, every agent its task's pods).
# Twice client-go's 5-10 min, within kube-apiserver's own default for a watch that asks for no
# length (its --min-request-timeout, 30-60 min): a renewal is the whole steady cost, and a dead
# connection is found by TCP keepalive (kubeapi.keepalive), not by the watch's end.
WATCH_SECONDS = (600, 1200)


class Informer:
    """A collection's objects kept current: one LIST, then WATCH from its resourceVersion, again
    each time a watch ends (the server's timeout, a dropped connection, an API server restart: with
    backoff up to 30 s); a new LIST only when the resourceVersion is too old (410 Gone). What
    client-go's informer does, for one reader, with the standard library. Counts its requests."""

    def __init__(
        self,
        path: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        name: str = "objects",
        keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        page: int | None = None,
        remember_deleted: bool = False,
        answer_within: float | None = None,
        watch_seconds: tuple[int, int] | None = None,
    ) -> None:
        from urllib.parse import quote

        # With `answer_within`: each WATCH lasts at most that long, so that a reader that must know
        # the API server heard it that recently (the self-fence) sends a request that often. The
        # reader may change it while the informer runs (ask_answers()).
        self.answer_within = answer_within
        self.watch_seconds = watch_seconds or WATCH_SECONDS  # each WATCH's length otherwise (random in it)
        # monotonic time of the last line of a watch (an event or a bookmark: the API server sends
        # one about every minute on a quiet watch), None before the first
        self.streamed_at: float | None = None
        self.streamed_rv: str | None = None  # that line's resourceVersion
        self._renewing = False  # renew() closed the open watch: a new one starts at once
        self._watch_ends: float | None = None  # when the open watch ends (monotonic), None before the first

        self.remember_deleted = remember_deleted  # keep the last state of deleted objects (gone())
        self.keep = keep or (lambda obj: obj)  # what is kept of each object: a release's pods are big
        # page=None: a LIST the API server answers from its watch cache (resourceVersion=0), for the
        # few objects a selector picks. Read from etcd instead, a selector that picks one pod of
        # 4096 has the API server decode all of them (~600 MB): 32 such LISTs at once timed out.
        # page=N: the release's pods, all of them wanted, in pages of N from etcd, so that no one
        # answer is ~600 MB to parse.
        self.page = page
        query: list[str] = []
        if label_selector:
            query.append("labelSelector=" + quote(label_selector))
        if field_selector:
            query.append("fieldSelector=" + quote(field_selector))
        self.path = path + ("?" + "&".join(query) if query else "")
        self.name = name
        self.items: dict[str, dict[str, Any]] = {}
        self.deleted: dict[str, dict[str, Any]] = {}  # name -> its last state, for objects deleted since they were seen
        self.synced = threading.Event()
        self.synced_at: float | None = None  # monotonic time of the first LIST
        self.changed = threading.Condition()
        self.error: Exception | None = None
        self.forbidden: str | None = None
        self.requests = 0
        # the API server's clock minus ours (server_offset), from its last answer
        self.clock_offset: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._resp: Any = None  # the open watch's response (api_open)

    def start(self) -> Informer:
        self._thread = threading.Thread(target=self.run, daemon=True, name="informer " + self.name)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching: the open watch is closed now, not at its end (minutes later)."""
        self._stop.set()
        sock = socket_of(self._resp) if self._resp is not None else None
        if sock is not None:
            try:  # a shutdown wakes the thread blocked reading it (a close would not)
                sock.shutdown(socket.SHUT_RDWR)
            except (OSError, ValueError):
                pass

    def ask_answers(self, within: float | None) -> None:
        """Have each WATCH last at most `within` seconds (None: its usual length). When first asked,
        or when the open watch would end later than that from now, end it now, so that a request
        is answered at once. Asked again (the self-fence asks at each check), it ends a watch that
        began as it was first asked and so missed it."""
        newly = within is not None and self.answer_within is None
        self.answer_within = within
        ends = self._watch_ends
        if within is not None and ends is not None and (newly or ends > time.monotonic() + within + 1):
            self.renew()

    def renew(self) -> None:
        """End the open watch; the informer opens the next one at once, from where it was."""
        sock = socket_of(self._resp) if self._resp is not None else None
        if sock is None:
            return
        self._renewing = True
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except (OSError, ValueError):
            pass

    def _opened(self, resp: Any) -> None:
        self._resp = resp
        offset = server_offset(resp.headers.get("Date"), time.time())
        if offset is not None:
            self.clock_offset = offset
        if self._stop.is_set():
            self.stop()

    def snapshot(self) -> list[dict[str, Any]]:
        with self.changed:
            return list(self.items.values())

    def wait_for_change(self, timeout: float) -> None:
        with self.changed:
            self.changed.wait(timeout)

    def gone(self) -> dict[str, dict[str, Any]]:
        """The objects deleted since they were seen, each as it was last seen."""
        with self.changed:
            return dict(self.deleted)

    def _replace(self, items: dict[str, dict[str, Any]]) -> None:
        with self.changed:
            if self.remember_deleted:
                for key in set(self.items) - set(items):  # deleted while no watch was open
                    self.deleted[key] = self.items[key]
            self.items = items
            if self.synced_at is None:
                self.synced_at = time.monotonic()
            self.synced.set()
            self.changed.notify_all()

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        key = obj.get("metadata", {}).get("name")
        with self.changed:
            if kind == "DELETED":  # its last state: a finished Job deleted at once still says how it ended
                self.items.pop(key, None)
                if self.remember_deleted:
                    self.deleted[key] = obj
            else:
                self.items[key] = obj
            self.changed.notify_all()

    def run(self) -> None:
        import random

        rv: str | None
        rv, backoff, failures = None, 1.0, 0
        while not self._stop.is_set():
            try:
                sep = "&" if "?" in self.path else "?"
                if rv is None:
                    rv = self._list(sep)
                self.requests += 1
                self._renewing = False
                seconds = random.randint(*self.watch_seconds)
                if self.answer_within:
                    seconds = min(seconds, max(1, int(self.answer_within)))
                self._watch_ends = time.monotonic() + seconds
                for event in api_watch("%s%sresourceVersion=%s" % (self.path, sep, rv), seconds, on_open=self._opened):
                    obj = event.get("object") or {}
                    rv = obj.get("metadata", {}).get("resourceVersion") or rv
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._apply(event["type"], self.keep(obj))
                    line_rv = obj.get("metadata", {}).get("resourceVersion")
                    if newer(line_rv, self.streamed_rv):  # a stale API server's repeated bookmark is no news
                        self.streamed_rv = line_rv
                        self.streamed_at = time.monotonic()  # after the event is applied: readers see both
                    if self._stop.is_set():
                        return
                backoff, failures = 1.0, 0
            except WatchExpired:
                rv = None
            except urllib.error.HTTPError as e:
                if e.code == 410:
                    rv = None
                    continue
                if e.code in (401, 403):
                    self.forbidden = "%s %s" % (e.code, e.reason)
                    with self.changed:
                        self.changed.notify_all()
                    return
                failures, backoff = self._failed(e, failures, backoff)
            except (
                ConfigError,
                urllib.error.URLError,
                OSError,
                ValueError,
                KeyError,
                AttributeError,
                http.client.HTTPException,
            ) as e:
                if self._stop.is_set():
                    return  # stop() closed the watch under us
                if self._renewing:
                    continue  # renew() closed it: the next watch goes on from the same resourceVersion
                failures, backoff = self._failed(e, failures, backoff)

    def _list(self, sep: str) -> Any:  # the LIST's resourceVersion (a str, from the JSON answer)
        """LIST (from the watch cache, or page by page: one snapshot, the pages share its
        resourceVersion; an expired continue token is a 410, and the LIST starts again); returns
        the resourceVersion the WATCH goes on from."""
        from urllib.parse import quote

        items: dict[str, dict[str, Any]]
        token: str | None
        items, token = {}, None
        while True:
            self.requests += 1
            if self.page is None:
                data = api("%s%sresourceVersion=0" % (self.path, sep))
            else:
                data = api("%s%slimit=%d%s" % (self.path, sep, self.page, "&continue=" + quote(token) if token else ""))
            for o in data.get("items") or []:
                items[o["metadata"]["name"]] = self.keep(o)
            token = data.get("metadata", {}).get("continue")
            if not token:
                self._replace(items)
                return data.get("metadata", {}).get("resourceVersion")

    def _failed(self, e: Exception, failures: int, backoff: float) -> tuple[int, float]:
        import random

        self.error = e
        failures += 1
        if failures == 1 or failures % 10 == 0:
            log("cannot watch %s (%s); retrying (attempt %d)" % (self.name, e, failures))
        self._stop.wait(backoff * (0.5 + random.random()))
        return failures, min(30.0, backoff * 2)


# ------------------------------------------------------------ running

# ------------------------------------------------------------ fencing pods of a lost node


def newer(rv: str | None, than: str | None) -> bool:
    """Is resourceVersion `rv` past `than`? (Kubernetes says to treat them as opaque; etcd's are
    integers, compared as such. Another server's: any change.)"""
    if not rv:
        return False
    if than is None:
        return True
    if rv.isdigit() and than.isdigit():
        return int(rv) > int(than)
    return rv != than


def server_offset(date: str | None, local_now: float) -> float | None:
    """The API server's clock minus this node's, from an answer's Date header (whole seconds:
    the offset is rounded towards the server being behind, so that it never makes a pod look
    stranded sooner), or None when there is none."""
    if not date:
        return None
    from email.utils import parsedate_to_datetime

    try:
        server = parsedate_to_datetime(date).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return server - local_now  # the header is truncated to the second: the server's "now" is up to 1 s later
