"""`make demo` as a new user's first command: a fresh clone, empty pip and Helm caches.

Clones this repository (HEAD) into a temporary folder, runs `make demo` there with
`XDG_CACHE_HOME` pointing at an empty folder (so no Helm is cached: it is fetched) and
`PIP_NO_CACHE_DIR=1` (every wheel downloaded), and prints when each phase ended, in seconds
from the start: the virtualenv, Helm, the first epoch, the end. No Helm may be on PATH for
the figure to include its fetch (the script says which Helm it found).

    python3 tests/bench/bench_fresh_demo.py [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKS = (
    ("virtualenv ready", re.compile(r"\[setup\] virtualenv ready")),
    ("Helm ready", re.compile(r"\[helm\] Helm \S+ ready")),
    ("first epoch", re.compile(r"\] epoch 1/")),
    ("run finished", re.compile(r"tf-cluster run-local finished")),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep the temporary clone")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tf-cluster-fresh-demo-"))
    clone = tmp / "tf-cluster"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CLUSTER_", "VIRTUAL_ENV"))}
    env |= {"XDG_CACHE_HOME": str(tmp / "cache"), "PIP_NO_CACHE_DIR": "1"}
    helm = shutil.which("helm", path=env.get("PATH"))
    print(f"[bench] fresh clone {clone}; Helm on PATH: {helm or 'none (it will be fetched)'}", flush=True)
    start = time.monotonic()
    seen: dict[str, float] = {}
    proc = subprocess.Popen(
        ["make", "demo"], cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.monotonic() - start
        for name, rx in MARKS:
            if name not in seen and rx.search(line):
                seen[name] = now
                print(f"[bench] {now:6.1f} s  {name}", flush=True)
    rc = proc.wait()
    total = time.monotonic() - start
    print(f"[bench] {total:6.1f} s  make demo exited {rc}")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    missing = [name for name, _ in MARKS if name not in seen and not (name == "Helm ready" and helm)]
    if rc or missing:
        print(f"[bench] failed: exit {rc}; never saw {', '.join(missing) or '-'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
