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


def extra_requirements(extra: str) -> list[str]:
    """The requirements of the package extra `tf-cluster[<extra>]`, as installed metadata has them
    (e.g. "tensorflow==2.21.0"); none when tf-cluster runs from a path without metadata."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        found = requires("tf-cluster") or []
    except PackageNotFoundError:
        return []
    out = []
    for line in found:
        requirement, _, marker = line.partition(";")
        if f'extra == "{extra}"' in marker.replace("'", '"'):
            out.append(requirement.strip())
    return out


def require_extra(extra: str, *modules: str, feature: str) -> None:
    """Stop with the install line when an optional feature's packages (the package extra
    `tf-cluster[<extra>]`) are missing, before anything is done. The line installs the whole extra
    into tf-cluster's own environment (the packages alone may lack one: `local` is TensorFlow with
    tf-keras), whether tf-cluster came from a clone, a wheel or a checkout's venv."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        wanted = " ".join(f"'{r}'" for r in extra_requirements(extra)) or " ".join(missing)
        raise ToolMissing(
            f"{feature} needs {', '.join(missing)} (the extra `tf-cluster[{extra}]`): "
            f"pipx inject tf-cluster {wanted} (installed with pipx), or pip install {wanted} in its environment; "
            f"from a clone: pipx install --force '.[{extra}]'; in a checkout: make setup"
        )
