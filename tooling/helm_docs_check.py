"""Is charts/tf-cluster/README.md what helm-docs makes of values.yaml's `# --` comments? (pre-commit's
helm-docs hook; tests/docs/test_docs.py checks the same.) `make docs` rewrites it.

    python3 tooling/helm_docs_check.py    # exit 1 with the difference, else 0

helm-docs is built from its Go module by `make setup` into .tools/bin/; without it, the check says
so and passes (a machine with only the lint virtualenv cannot run it)."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELM_DOCS = ROOT / ".tools" / "bin" / "helm-docs"
README = ROOT / "charts" / "tf-cluster" / "README.md"


def main() -> int:
    if not HELM_DOCS.is_file():
        print(f"helm-docs: skipped, {HELM_DOCS.relative_to(ROOT)} is not here (make setup builds it)")
        return 0
    argv = [str(HELM_DOCS), "--chart-search-root", "charts", "--template-files", "README.md.gotmpl", "--dry-run"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        print(f"helm-docs failed (exit {proc.returncode}): {proc.stderr.strip()}", file=sys.stderr)
        return 1
    want, have = proc.stdout.strip(), README.read_text().strip()
    if want == have:
        return 0
    diff = difflib.unified_diff(have.splitlines(), want.splitlines(), "README.md", "helm-docs", lineterm="", n=1)
    print("\n".join(list(diff)[:40]), file=sys.stderr)
    print(f"{README.relative_to(ROOT)} is stale: run `make docs`", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
