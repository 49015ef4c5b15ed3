"""SIGTERM or SIGHUP to `tf-cluster run-local` ends it as Ctrl-C does (issue 44): every task it
started is stopped, nothing is left running, and it says so in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tf_cluster import ROOT

EXAMPLE = ROOT / "values-examples" / "mwms-cpu.yaml"


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line or environment holds `text` (the run directory: every task's has it)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            blob = (d / "cmdline").read_bytes() + (d / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if text.encode() in blob:
            found.append(int(d.name))
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signalled_run_local_stops_every_task_and_exits(tmp_path, sig):
    workdir = tmp_path / "run"
    argv = [sys.executable, "-m", "tf_cluster.cli", "run-local", "-f", EXAMPLE, "--workdir", workdir]
    argv += ["--set-string", "env[0].name=EPOCHS,env[0].value=1000,env[1].name=STEPS_PER_EPOCH,env[1].value=50"]
    proc = subprocess.Popen(list(map(str, argv)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = threading.Event()
    out: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            if line.startswith("[worker-1] "):  # the last task printed: every task is running
                started.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if not started.wait(180):
            proc.kill()
            raise AssertionError("no task printed within 180 s:\n" + "".join(out[-30:]) + proc.communicate()[1])
        running = processes_mentioning(str(workdir))
        assert running, "the tasks' processes are found by their run directory (else this test proves nothing)"
        t0 = time.monotonic()
        proc.send_signal(sig)
        rc = proc.wait(90)
        took = time.monotonic() - t0
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 128 + sig, (rc, err[-2000:])
    assert f"stopped by {sig.name}" in err and "Traceback" not in err, err[-2000:]
    left = processes_mentioning(str(workdir))
    assert not left, f"{len(left)} process(es) of the run still alive after {sig.name}: {left}"
    print(f"{sig.name}: {len(running)} process(es) of the run stopped, run-local exited {rc} after {took:.1f}s")
