"""tf-cluster: build, render, validate and run the tf-cluster Helm chart."""

from pathlib import Path

__version__ = "0.1.0"

#: The repository root (the tool runs from a checkout).
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "tf-cluster"
TOOLS_BIN = ROOT / ".tools" / "bin"
