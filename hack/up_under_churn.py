#!/usr/bin/env python3
"""`hack/node up` N times in a row while this machine opens outgoing connections (issue 41).

A churn of loopback connections holds HELD connections open at a time, each replaced as soon as it
closes, so their source ports sweep Linux's ephemeral range (net.ipv4.ip_local_port_range) over
and over, as a busy machine's do. Each round takes the node down (images kept) and brings it up
again; the script stops at the first failed `up` and prints a table: the round, how long `up` took,
and how many of the churn's source ports fell on the ports the harness listened on before it
moved them out of the range (ports where that round's `up` could have collided).

    python3 hack/up_under_churn.py [--runs 20] [--held 2000]     (root; the node built and its images made)
"""

from __future__ import annotations

import argparse
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODE = [sys.executable, str(HERE / "node")]
# the fixed ports of 5539a76, inside 32768-60999: etcd, the registry, Redis, Argo CD's three, git
OLD_PORTS = {32379, 32380, 35000, 36379, 38081, 38082, 38084, 39080}


class Churn:
    """HELD loopback connections kept open, each closed and replaced in turn; counts the source
    ports it took that were among OLD_PORTS."""

    def __init__(self, held: int, rate: float) -> None:
        self.server = socket.create_server(("127.0.0.1", 0), backlog=4096)
        self.port = self.server.getsockname()[1]
        self.held, self.every, self.stop, self.lock = held, 1 / rate, threading.Event(), threading.Lock()
        self.opened, self.hits = 0, 0
        self.sources: set[int] = set()
        threading.Thread(target=self._accept, daemon=True).start()
        threading.Thread(target=self._connect, daemon=True).start()

    def _accept(self) -> None:
        peers = []
        while not self.stop.is_set():
            conn, _ = self.server.accept()
            peers.append(conn)
            if len(peers) > self.held * 2:
                for c in peers[: self.held]:
                    c.close()
                del peers[: self.held]

    def _connect(self) -> None:
        open_, due = [], time.monotonic()
        while not self.stop.is_set():
            due += self.every  # paced: each closed one waits in TIME-WAIT for 60 s, rate x 60 of them
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            except OSError:
                time.sleep(0.05)  # the range exhausted for a moment: try again
                continue
            source = s.getsockname()[1]
            with self.lock:
                self.opened += 1
                self.sources.add(source)
                self.hits += source in OLD_PORTS
            open_.append(s)
            if len(open_) > self.held:
                open_.pop(0).close()

    def take(self) -> tuple[int, int, int]:
        with self.lock:
            out = (self.opened, len(self.sources), self.hits)
            self.opened, self.hits = 0, 0
            self.sources = set()
        return out


def node(verb: str, log: Path) -> tuple[int, float]:
    t0 = time.monotonic()
    with log.open("a") as f:
        rc = subprocess.run([*NODE, verb], stdout=f, stderr=subprocess.STDOUT).returncode
    return rc, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--held", type=int, default=2000, help="connections the churn holds open at a time")
    ap.add_argument("--rate", type=float, default=150, help="new connections a second (x 60 s in TIME-WAIT)")
    ap.add_argument("--log", type=Path, default=Path("/tmp/up-under-churn.log"))
    args = ap.parse_args()
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.held + 256)), hard))
    churn = Churn(args.held, args.rate)
    print(
        f"[churn] {args.held} loopback connections held open, {args.rate:.0f} new a second, source ports "
        f"from {low}-{high}; `hack/node down` then `up`, {args.runs} times (log: {args.log})",
        flush=True,
    )
    print("| round | up | up took (s) | connections opened | distinct source ports | on the old fixed ports |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |", flush=True)
    failed = 0
    for i in range(1, args.runs + 1):
        rc, _ = node("down", args.log)
        if rc:
            print(f"[churn] `down` failed (exit {rc}) before round {i}: see {args.log}")
            return rc
        churn.take()
        rc, took = node("up", args.log)
        opened, distinct, hits = churn.take()
        print(
            f"| {i} | {'ok' if rc == 0 else f'FAILED ({rc})'} | {took:.0f} | {opened} | {distinct} | {hits} |",
            flush=True,
        )
        if rc:
            failed = i
            break
    churn.stop.set()
    print(f"[churn] {'up failed in round ' + str(failed) if failed else f'{args.runs} of {args.runs} ups succeeded'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
