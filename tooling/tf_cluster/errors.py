"""The few error types the tool raises; each carries what a user needs to act."""

from __future__ import annotations


class TfClusterError(Exception):
    """Base class. `exit_code` is what the CLI exits with."""

    exit_code = 1


class UsageError(TfClusterError):
    """Bad arguments or values a user can fix."""

    exit_code = 2


class ToolMissing(TfClusterError):
    """An external tool (helm, podman, ...) is not installed."""

    exit_code = 3


class RenderError(TfClusterError):
    """`helm template` refused the values (schema or a chart `fail`)."""

    exit_code = 4

    def __init__(self, message: str, *, values_files: list[str] | None = None):
        super().__init__(message)
        self.values_files = values_files or []


class ValidationError(TfClusterError):
    """Rendered manifests do not match the Kubernetes schema."""

    exit_code = 5


class BuildError(TfClusterError):
    """An image build failed."""

    exit_code = 6


class RunError(TfClusterError):
    """A local or cluster run did not succeed."""

    exit_code = 7


def yaml_problem(e: Exception) -> tuple[str, str]:
    """Where a YAML parser's error is ("line 2, column 1", or "" when it does not say) and what it is."""
    mark = getattr(e, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return where, str(getattr(e, "problem", None) or e)


def require_extra(extra: str, *modules: str, feature: str) -> None:
    """Stop with the install line when an optional feature's packages (the package extra
    `tf-cluster[<extra>]`) are missing, before anything is done."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ToolMissing(
            f"{feature} needs {', '.join(missing)} (the extra `tf-cluster[{extra}]`): "
            f"pipx install 'tf-cluster[{extra}]' (or `pipx inject tf-cluster {' '.join(missing)}`, "
            f"`pip install 'tf-cluster[{extra}]'`; in a checkout: make setup)"
        )
