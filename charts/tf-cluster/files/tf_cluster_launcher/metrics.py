"""The task's progress as Prometheus gauges, served at GET /metrics."""

from __future__ import annotations

import math
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Sequence

from .common import STARTED, env, log
from .progress import Progress

if TYPE_CHECKING:
    import http.server

STATES = ("waiting_for_peers", "training", "stopped_by_leader", "exited")


def prometheus_number(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def prometheus_labels(pairs: list[tuple[str, Any]]) -> str:
    escaped = [(k, str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")) for k, v in pairs]
    return ",".join('%s="%s"' % kv for kv in escaped)


class Metrics:
    """The task's state and progress, and their Prometheus text (version 0.0.4)."""

    def __init__(self, port: int, labels: list[tuple[str, str]], failures: int = 0, started: float = STARTED) -> None:
        self.port, self.labels, self.failures, self.started = port, labels, failures, started
        self.lock = threading.Lock()
        self.progress = Progress()
        self.state = "waiting_for_peers"
        self.waited: list[float | None] = [None, None]  # the peer wait's start and end (monotonic)
        self.last_progress: float | None = None  # wall clock of the last progress line

    @classmethod
    def from_env(cls) -> Metrics | None:
        """The exporter TF_CLUSTER_METRICS_PORT asks for, else None."""
        port = env("TF_CLUSTER_METRICS_PORT")
        if not port:
            return None
        if not port.isdigit() or not 0 < int(port) < 65536:
            log("TF_CLUSTER_METRICS_PORT=%r is not a port; no metrics" % port)
            return None
        failures = env("TF_CLUSTER_INDEX_FAILURES")
        labels = [
            ("release", env("TF_CLUSTER_RELEASE")),
            ("role", env("TF_CLUSTER_ROLE", "task")),
            ("index", env("JOB_COMPLETION_INDEX") or env("TF_TASK_INDEX", "0")),
            ("run", env("TF_CLUSTER_RUN")),
        ]
        return cls(int(port), labels, int(failures) if failures.isdigit() else 0)

    def set_state(self, state: str, unless: Sequence[str] = ()) -> None:
        with self.lock:
            if self.state not in unless:
                self.state = state

    def waiting(self, started: float) -> None:
        with self.lock:
            self.state, self.waited[0] = "waiting_for_peers", started

    def waited_until(self, ended: float) -> None:
        with self.lock:
            self.waited[1] = ended

    def read_line(self, line: str) -> None:
        with self.lock:
            if self.progress.feed(line):
                self.last_progress = time.time()

    def text(self) -> str:
        with self.lock:
            reading = self.progress.reading()
            state, last = self.state, self.last_progress
            start, end = self.waited
        wait = ((end if end is not None else time.monotonic()) - start) if start is not None else 0.0
        families: list[tuple[str, str, Any]] = [
            (
                "state",
                "1 for the task's current state, 0 for the others.",
                [((("state", s),), int(s == state)) for s in STATES],
            ),
            ("epoch", "Epoch the task last reported (Keras counts from 1).", reading.get("epoch")),
            ("epochs", "Epochs the task trains for, as it reported.", reading.get("epochs")),
            ("step", "Training step the task last reported, counted over the run.", reading.get("step")),
            ("loss", "Loss the task last reported (NaN and Inf as reported).", reading.get("loss")),
            (
                "metric",
                "Every other metric the task last reported, by name.",
                [((("name", k),), v) for k, v in sorted(reading.get("metrics", {}).items())],
            ),
            ("steps_per_second", "Training steps per second the task last reported.", reading.get("steps_per_second")),
            ("examples_per_second", "Examples per second the task last reported.", reading.get("examples_per_second")),
            ("peer_wait_seconds", "Seconds the task waited for its peers to resolve (growing while it waits).", wait),
            ("last_progress_timestamp_seconds", "Unix time of the task's last progress line.", last),
            ("start_timestamp_seconds", "Unix time the task's launcher started.", self.started),
            (
                "index_failures",
                "Failures of this task's index before this pod (the Job's per-index count).",
                self.failures,
            ),
        ]
        out: list[str] = []
        for name, doc, samples in families:
            if samples is None or samples == []:
                continue
            if not isinstance(samples, list):
                samples = [((), samples)]
            name = "tf_cluster_task_" + name
            out.append("# HELP %s %s" % (name, doc))
            out.append("# TYPE %s gauge" % name)
            for extra, value in samples:
                out.append(
                    "%s{%s} %s" % (name, prometheus_labels(list(self.labels) + list(extra)), prometheus_number(value))
                )
        return "\n".join(out) + "\n"

    def serve(self) -> http.server.ThreadingHTTPServer | None:
        """GET /metrics on the port, every address (IPv6 and IPv4 where it can), in a daemon thread."""
        import http.server
        import socketserver

        metrics = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    body, status, kind = b"not found: the metrics are at /metrics\n", 404, "text/plain"
                else:
                    body, status = metrics.text().encode("utf-8"), 200
                    kind = "text/plain; version=0.0.4; charset=utf-8"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass  # a scrape every few seconds is not news

        def bind(family: socket.AddressFamily, host: str) -> http.server.ThreadingHTTPServer:
            class Server(http.server.ThreadingHTTPServer):
                daemon_threads = True
                address_family = family

                def server_bind(self) -> None:
                    if family == socket.AF_INET6:  # and IPv4, as TensorFlow's server does
                        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                    socketserver.TCPServer.server_bind(self)
                    self.server_name, self.server_port = "localhost", self.server_address[1]  # no DNS lookup

            return Server((host, self.port), Handler)

        try:
            try:
                server = bind(socket.AF_INET6, "::")
            except OSError:  # no IPv6 here
                server = bind(socket.AF_INET, "0.0.0.0")
        except OSError as e:
            log("cannot serve metrics on port %d (%s); training goes on without them" % (self.port, e))
            return None
        threading.Thread(target=server.serve_forever, daemon=True).start()
        log("serving metrics on :%d/metrics" % self.port)
        return server
