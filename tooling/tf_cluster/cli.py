# PYTHON_ARGCOMPLETE_OK  (argcomplete: this command completes itself; `tf-cluster completion bash`)
"""`tf-cluster` command line. Exit codes: 0 ok, 1 the cluster refused or failed a request, 2 usage
(a missing or unreadable file, bad YAML, a bad kubeconfig, a version-policy or packaging refusal, no
such release), 3 tool or extra missing, 4 render refused, 5 invalid manifests, 6 build failed, 7 run
failed (run-local or smoke). The table: `tf-cluster docs exit-codes`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable

from . import version
from .commands import (
    build,
    chart,
    completion,
    docs,
    from_tfjob,
    install,
    logs,
    package,
    render,
    run_local,
    smoke,
    status,
    tune,
    validate,
)
from .errors import TfClusterError

#: the chart's maintainers' verbs: left out of the user's listing (`tf-cluster package --help` works)
MAINTAINER = ("package", "publish", "release")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tf-cluster",
        description="Run distributed TensorFlow on Kubernetes with the tf-cluster chart: render and validate it, "
        "build its images, run it on this machine or a cluster, and watch it.",
        epilog=f"Maintainers of the chart: {', '.join(MAINTAINER)} (each with --help). Exit codes: 0 ok, 1 the "
        "cluster refused, 2 usage, 3 a tool or extra missing, 4 values refused, 5 invalid manifests, 6 build "
        "failed, 7 run failed (the table: tf-cluster docs exit-codes).",
    )
    p.add_argument("--version", action="version", version=f"tf-cluster {version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for module in (
        render,
        validate,
        build,
        run_local,
        smoke,
        install,
        status,
        logs,
        package,
        tune,
        from_tfjob,
        chart,
        docs,
        completion,
    ):
        module.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["tune", "show"]:  # `tf-cluster tune show STUDY`
        argv = ["tune-show", *argv[2:]]
    p = parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (argcomplete's protocol): answer, exit
        import argcomplete

        argcomplete.autocomplete(p)
    args = p.parse_args(argv)
    restore = stop_on_signals()
    try:
        return args.func(args)
    except TfClusterError as e:
        print(f"tf-cluster {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except Stopped as e:
        print(f"tf-cluster {args.command}: stopped by {e.name}; what it started was stopped", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print(f"tf-cluster {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        restore()


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a service manager, a closed terminal, `kill`): ends a command as Ctrl-C
    does, through the same cleanup (tasks stopped, releases and namespaces it made removed)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


def stop_on_signals() -> Callable[[], None]:
    """SIGTERM and SIGHUP raise Stopped while a command runs; returns what puts the handlers back."""
    signums = (signal.SIGTERM, signal.SIGHUP)
    if threading.current_thread() is not threading.main_thread():  # main() called from a thread: leave them
        return lambda: None
    before = {s: signal.getsignal(s) for s in signums}

    def stop(signum: int, _frame: object) -> None:
        for s in signums:  # a second signal must not cut the cleanup short
            signal.signal(s, signal.SIG_IGN)
        raise Stopped(signum)

    for s in signums:
        signal.signal(s, stop)

    def restore() -> None:
        for s, handler in before.items():
            signal.signal(s, handler)

    return restore


if __name__ == "__main__":
    sys.exit(main())
