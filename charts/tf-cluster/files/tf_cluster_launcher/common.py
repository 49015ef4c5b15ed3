"""What every module of the launcher shares: exit codes, the words for a leading Job's end, the
environment, the log and the stdout lock."""

from __future__ import annotations

import os
import sys
import threading
import time

EXIT_LEADER_FAILED = 3

EXIT_PEERS_TIMEOUT = 4

EXIT_CONFIG = 5

EXIT_PEER_LOST = 6  # the ParameterServer coordinator restarts after a peer's node was lost

SUCCESS = ("Complete", "SuccessCriteriaMet")

FAILURE = ("Failed", "FailureTarget")

ABANDONED = "Abandoned"  # an interactive coordinator stopped renewing its heartbeat (kernel gone)

GONE = "Gone"  # the leading Job was deleted before it finished, or never existed

UNWATCHABLE = "Unwatchable"  # the API refused this task's token a read of the leading Job

STARTED = time.time()  # wall clock: compared with the heartbeat's renewTime


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_seconds(name: str, default: int) -> int:
    """A whole number of seconds from the environment; `default` when unset or not one."""
    value = env(name).strip()
    return int(value) if value.isdigit() else default


def task_name() -> str:
    return "%s-%s" % (env("TF_CLUSTER_ROLE", "task"), env("TF_TASK_INDEX", "0"))


def now_rfc3339() -> str:
    """This moment as the API's timestamps write it (an Event's time, a condition's transition)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def log(msg: str) -> None:
    sys.stderr.write("[launcher %s] %s\n" % (task_name(), msg))
    sys.stderr.flush()


class Stopped(Exception):
    """SIGTERM or SIGINT arrived before the command started: the launcher ends at once (it is the
    container's PID 1, for which the kernel ignores a signal left at its default action)."""

    def __init__(self, signum: int) -> None:
        Exception.__init__(self, signum)
        self.signum = signum


class ConfigError(Exception):
    pass


OUTPUT = threading.RLock()  # the launcher's stdout: the child's chunks and the METRICS lines, each whole
