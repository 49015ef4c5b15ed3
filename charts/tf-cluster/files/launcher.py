"""tf-cluster launcher: wraps a TensorFlow task's command (the package tf_cluster_launcher).

Standard library only, so it runs in any image with Python 3.8+.

    python3 launcher.py -- <command> [args...]    run a task
    python3 launcher.py --check                    `helm test`: check the run
"""

import sys

from tf_cluster_launcher.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
