"""Build the docs site (mkdocs.yml, docs/): `make site` and tests/docs/test_docs_site.py share it.

MkDocs and Material run from their own virtualenv, .venv-docs/, made from the pinned
docs/requirements.txt with `python3 -m venv` and pip, and reused while the sha256 of that file
matches the stamp written inside it once the install succeeded (a changed pin, or an install cut
short, makes a new one). The project's .venv never carries the docs' dependencies, and this file
is stdlib only: `make site` needs no `make setup`.

    python3 tests/docs_site.py [--site-dir DIR]     (default: site/)
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "docs" / "requirements.txt"
VENV = ROOT / ".venv-docs"
STAMP_NAME = "requirements.sha256"


class DocsSiteError(RuntimeError):
    """The docs' virtualenv could not be made (venv or pip failed); carries their output."""


def mkdocs(venv: Path = VENV, requirements: Path = REQUIREMENTS) -> Path:
    """The virtualenv's `mkdocs`, after creating or refreshing the virtualenv if its stamp is not
    the requirements file's sha256. Serialised on the requirements file, so two builds at once
    do not install into the same directory."""
    want = hashlib.sha256(requirements.read_bytes()).hexdigest()
    stamp = venv / STAMP_NAME
    with requirements.open("rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.is_file() and stamp.read_text().strip() == want):
            shutil.rmtree(venv, ignore_errors=True)
            for argv in (
                [sys.executable, "-m", "venv", str(venv)],
                [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                 "--no-input", "-r", str(requirements)],
            ):  # fmt: skip
                proc = subprocess.run(argv, capture_output=True, text=True)
                if proc.returncode != 0:
                    raise DocsSiteError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
            stamp.write_text(want + "\n")
    return venv / "bin" / "mkdocs"


def build(site_dir: Path, project: Path = ROOT, exe: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of project/mkdocs.yml into site_dir, run in project (the snippets'
    paths are relative to it). Its return code and output are the caller's to judge."""
    return subprocess.run(
        [str(exe or mkdocs()), "build", "--strict", "--config-file", str(project / "mkdocs.yml"),
         "--site-dir", str(site_dir)],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's end-of-life banner on every build
        timeout=600,
    )  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site-dir", type=Path, default=ROOT / "site")
    args = ap.parse_args()
    try:
        exe = mkdocs()
    except DocsSiteError as e:
        print(e, file=sys.stderr)
        return 1
    start = time.monotonic()
    proc = build(args.site_dir.resolve(), exe=exe)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    took = time.monotonic() - start
    print(f"[site] {'built' if proc.returncode == 0 else 'FAILED'} in {took:.1f} s: {args.site_dir}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
