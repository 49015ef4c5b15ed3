"""`python hack/node up|status|down|env` (the Makefile's NODE)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # so `node` imports as a package

from node.cli import main  # noqa: E402

sys.exit(main())
