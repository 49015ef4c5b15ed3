"""The Kubernetes API with the pod's token: one request, or a WATCH stream, over the standard library."""

from __future__ import annotations

import json
import os
import socket
import ssl
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Iterator

from .common import ConfigError, env

SA_DIR = os.environ.get("TF_CLUSTER_SA_DIR", "/var/run/secrets/kubernetes.io/serviceaccount")

# When this process last sent a request the API server answered (monotonic, the request's start):
# a round trip, so the server heard it then. A watch's events or its end on a connection opened
# earlier are not counted: a cut can leave the server's side of an open stream flowing (measured
# on the e2e harness: ~60 s of a watch's data after its node's requests stopped getting through).
# The self-fence reads it, and counts a watch's lines apart, only while they show its pod Ready
# (selffence.unheard_for).
ANSWERED: dict[str, float] = {}


def answered(at: float) -> None:
    ANSWERED["at"] = max(at, ANSWERED.get("at", at))


def answered_at() -> float | None:
    """When the API server last answered a request of this process (monotonic), None before."""
    return ANSWERED.get("at")


def silent_for() -> float | None:
    """Seconds since the API server last answered, None before its first answer."""
    at = ANSWERED.get("at")
    return None if at is None else time.monotonic() - at


# ------------------------------------------------------------ leader status


def api_open(
    path: str,
    method: str = "GET",
    body: dict[str, Any] | None = None,
    content_type: str = "application/merge-patch+json",
    timeout: float = 10,
) -> Any:  # urlopen's answer (an http.client.HTTPResponse; typeshed says Any)
    """One Kubernetes API request with the pod's service account token: the open response."""
    host, port = env("KUBERNETES_SERVICE_HOST"), env("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ConfigError(
            "not in a Kubernetes pod (KUBERNETES_SERVICE_HOST unset) and TF_CLUSTER_LEADER_STATUS_FILE not given"
        )
    if ":" in host:
        host = "[%s]" % host
    with open(os.path.join(SA_DIR, "token")) as f:
        token = f.read().strip()
    ctx = ssl.create_default_context(cafile=os.path.join(SA_DIR, "ca.crt"))
    headers = {"Authorization": "Bearer " + token, "Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = content_type
    req = urllib.request.Request("https://%s:%s%s" % (host, port, path), data=data, headers=headers, method=method)
    start = time.monotonic()
    try:
        resp = urllib.request.urlopen(req, timeout=timeout, context=ctx)
    except urllib.error.HTTPError as e:
        if e.code < 500 and e.code != 429:
            answered(start)  # a refusal is an answer too: the server heard the request
        # not a 5xx or a 429: a server that cannot reach its storage (a partition's minority) still sends those
        raise
    answered(start)
    return resp


def api(
    path: str,
    method: str = "GET",
    body: dict[str, Any] | None = None,
    content_type: str = "application/merge-patch+json",
) -> Any:  # the JSON answer
    """One Kubernetes API call with the pod's service account token; the decoded JSON answer."""
    with api_open(path, method, body, content_type) as resp:
        return json.load(resp)


# Seconds a WATCH request may wait for its answer's headers; its lines, once it is answered, may be
# as far apart as the watch lasts.
WATCH_HEADERS_S = 30


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): LIST again."""


def api_watch(
    path: str, timeout_seconds: int, on_open: Callable[[Any], None] | None = None
) -> Iterator[dict[str, Any]]:
    """The events of one WATCH request (a JSON object per line) until the server ends it after
    `timeout_seconds` (or the connection drops: the exception reaches the caller). `on_open` gets
    the open response (closing it from another thread ends the watch)."""
    sep = "&" if "?" in path else "?"
    resp = api_open(
        "%s%swatch=1&allowWatchBookmarks=true&timeoutSeconds=%d" % (path, sep, timeout_seconds),
        timeout=WATCH_HEADERS_S,  # a server that holds the request (a cache that never fills) is left soon
    )
    sock = socket_of(resp)
    if sock is not None:  # its lines may then be minutes apart (a quiet watch without bookmarks)
        sock.settimeout(timeout_seconds + 30)
    keepalive(resp)
    if on_open is not None:
        on_open(resp)
    with resp:
        for line in resp:
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                if status.get("code") == 410:
                    raise WatchExpired(status.get("message", "too old resource version"))
                raise ValueError("watch error: %s" % status.get("message", status))
            yield event


def socket_of(resp: Any) -> Any:  # a socket.socket or None, read from private attributes
    """The socket under an open urllib response (None if there is no plain one: a proxy, another
    Python)."""
    try:
        return resp.fp.raw._sock
    except AttributeError:
        return None


def keepalive(resp: Any) -> None:
    """TCP keepalives on a watch's connection: a peer that vanished without a reset (a dropped NAT
    entry, a load balancer's idle cut) is found in ~1 minute, not at the watch's end."""
    sock = socket_of(resp)
    if sock is None:
        return  # the watch's own end still bounds it
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for opt, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, opt):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
    except OSError:
        pass
