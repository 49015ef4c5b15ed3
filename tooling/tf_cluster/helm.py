"""The one place Helm is called: every Helm argv of the CLI and of every test suite is built here.

`Values` is what a user hands Helm about values (`-f`, `--set`, `--set-string`,
`--set-file`); `Helm` is one pinned binary (Helm 4 by default, Helm 3 on request),
optionally bound to a kubeconfig and a namespace, with one method per verb.
`template` raises `RenderError` with Helm's message; the verbs that change a
cluster return the finished process and raise `HelmError` only with `check=True`,
so a test can assert on a refusal (e.g. an immutable field).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import CHART, toolcache
from .errors import RenderError, RunError

MAJORS = tuple(toolcache.NAMES)


class HelmError(RunError):
    """A Helm command that changes a cluster failed; the message is Helm's, cleaned. Exit 1: the
    cluster (or Helm with it) refused or failed a request (docs/reference/exit-codes.md)."""

    exit_code = 1

    def __init__(self, verb: str, proc: subprocess.CompletedProcess):
        self.verb, self.proc = verb, proc
        super().__init__(
            f"helm {verb} failed (exit {proc.returncode}): {clean_helm_error(proc.stderr or proc.stdout or '')}"
        )


def helm_binary(major: str = "4") -> str:
    """Path of the helm of that major version: `TF_CLUSTER_HELM<major>`, a checkout's .tools/bin, PATH,
    else Helm 4 fetched once into the user cache (tf_cluster.toolcache)."""
    return toolcache.helm_path(major)


@dataclass(frozen=True)
class Values:
    """Values as Helm takes them, in Helm's precedence order (files, then --set*, later wins)."""

    files: tuple[str | Path, ...] = ()
    set: tuple[str, ...] = ()
    set_string: tuple[str, ...] = ()
    set_file: tuple[str, ...] = ()
    set_json: tuple[str, ...] = ()

    FLAGS = (
        ("files", "-f"),
        ("set", "--set"),
        ("set_string", "--set-string"),
        ("set_file", "--set-file"),
        ("set_json", "--set-json"),
    )

    @classmethod
    def of(
        cls,
        files: Iterable[str | Path] = (),
        set: Iterable[str] = (),
        set_string: Iterable[str] = (),
        set_file: Iterable[str] = (),
        set_json: Iterable[str] = (),
    ) -> Values:
        return cls(tuple(files), tuple(set), tuple(set_string), tuple(set_file), tuple(set_json))

    def plus(self, other: Values) -> Values:
        return Values(*(getattr(self, name) + getattr(other, name) for name, _ in self.FLAGS))

    def argv(self) -> list[str]:
        out: list[str] = []
        for name, flag in self.FLAGS:
            for item in getattr(self, name):
                out += [flag, str(item)]
        return out

    def describe(self) -> str:
        return " ".join(self.argv())


@dataclass(frozen=True)
class Helm:
    """One Helm binary, optionally bound to a cluster (kubeconfig) and a namespace."""

    major: str = "4"
    kubeconfig: str | Path | None = None
    namespace: str | None = None

    def argv(self, verb: str, *args: str | Path) -> list[str]:
        out = [helm_binary(self.major), verb]
        if self.kubeconfig:
            out += ["--kubeconfig", str(self.kubeconfig)]
        if self.namespace:
            out += ["--namespace", self.namespace]
        return out + [str(a) for a in args]

    def version(self) -> str:
        """`helm version --short`, e.g. v4.3.1+g...."""
        return subprocess.run(self.argv("version", "--short"), capture_output=True, text=True).stdout.strip()

    def run(self, verb: str, *args: str | Path, check: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.argv(verb, *args), capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise failure(verb, proc)
        return proc

    # ------------------------------------------------------------ verbs
    def template_argv(
        self,
        release: str,
        values: Values = Values(),
        *,
        chart: Path = CHART,
        kube_version: str | None = None,
        api_versions: Sequence[str] = (),
    ) -> list[str]:
        extra = ["--kube-version", kube_version] if kube_version else []
        for a in api_versions:
            extra += ["--api-versions", a]
        return self.argv("template", release, chart, *values.argv(), *extra)

    def render(self, release: str = "tf", values: Values = Values(), **kw) -> subprocess.CompletedProcess:
        """`helm template` as a finished process (for callers that judge a refusal themselves)."""
        return subprocess.run(self.template_argv(release, values, **kw), capture_output=True, text=True)

    def template(self, release: str = "tf", values: Values = Values(), **kw) -> str:
        """Render the chart; return the manifest text. Raises RenderError with Helm's message."""
        proc = self.render(release, values, **kw)
        if proc.returncode != 0:
            raise RenderError(clean_helm_error(proc.stderr), values_files=[str(f) for f in values.files])
        return proc.stdout

    def user_values(self, values: Values) -> dict[str, Any]:
        """The values these flags give the chart, merged by Helm itself (files, then --set*),
        without the chart's defaults: rendered through a scratch chart that has none."""
        with tempfile.TemporaryDirectory() as tmp:
            chart = Path(tmp) / "values-of"
            (chart / "templates").mkdir(parents=True)
            (chart / "Chart.yaml").write_text("apiVersion: v2\nname: values-of\nversion: 0.0.0\n")
            (chart / "templates" / "values.yaml").write_text("{{ toJson .Values }}\n")
            text = self.template("values-of", values, chart=chart)
        docs = parse(text)
        return docs[0] if docs else {}

    def install(
        self,
        release: str,
        values: Values = Values(),
        *,
        chart: Path = CHART,
        wait: bool = False,
        timeout: str | None = None,
        check: bool = False,
    ) -> subprocess.CompletedProcess:
        return self.run("install", release, chart, *values.argv(), *_wait(wait, timeout), check=check)

    def upgrade(
        self,
        release: str,
        values: Values = Values(),
        *,
        chart: Path = CHART,
        install: bool = False,
        wait: bool = False,
        timeout: str | None = None,
        check: bool = False,
    ) -> subprocess.CompletedProcess:
        extra = ["--install"] if install else []
        return self.run("upgrade", release, chart, *values.argv(), *extra, *_wait(wait, timeout), check=check)

    def rollback(self, release: str, *, wait: bool = False, timeout: str | None = None) -> subprocess.CompletedProcess:
        """Back to the release's previous revision (what an interrupted upgrade leaves pending)."""
        return self.run("rollback", release, *_wait(wait, timeout))

    def test(self, release: str, *, timeout: str = "5m", check: bool = False) -> subprocess.CompletedProcess:
        return self.run("test", release, "--timeout", timeout, check=check)

    def uninstall(
        self, release: str, *, wait: bool = False, timeout: str | None = None, check: bool = False
    ) -> subprocess.CompletedProcess:
        return self.run("uninstall", release, *_wait(wait, timeout), check=check)

    def releases(self) -> list[str]:
        """The names of the namespace's releases in any state (deployed, failed, pending, superseded,
        uninstalling, or uninstalled with --keep-history). Helm 4 has no `list --all`: the states, named
        one by one as both majors take them. A refusal raises (an empty list is an answer)."""
        states = ("--deployed", "--failed", "--pending", "--superseded", "--uninstalled", "--uninstalling")
        return self.run("list", "-q", *states, check=True).stdout.split()

    def lint(
        self, values: Values = Values(), *, chart: Path = CHART, strict: bool = True, check: bool = False
    ) -> subprocess.CompletedProcess:
        return self.run("lint", chart, *values.argv(), *(["--strict"] if strict else []), check=check)

    def package(
        self,
        destination: Path,
        *,
        chart: Path = CHART,
        version: str | None = None,
        sign_key: str | None = None,
        keyring: Path | None = None,
        passphrase_file: Path | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        """`helm package`; with `sign_key`, `--sign` with that key from `keyring` (a GnuPG
        secret keyring in the legacy format: `gpg --export-secret-keys > secring.gpg`)."""
        extra: list[str | Path] = ["--version", version] if version else []
        if sign_key:
            extra += ["--sign", "--key", sign_key]
            if keyring:
                extra += ["--keyring", keyring]
            if passphrase_file:
                extra += ["--passphrase-file", passphrase_file]
        return self.run("package", chart, "--destination", destination, *extra, check=check)

    def verify(self, package: Path, keyring: Path, *, check: bool = False) -> subprocess.CompletedProcess:
        """`helm verify`: the package's .prov is signed by a key in `keyring` and its digest matches."""
        return self.run("verify", package, "--keyring", keyring, check=check)

    def push(
        self, package: Path, remote: str, *, plain_http: bool = False, check: bool = True
    ) -> subprocess.CompletedProcess:
        """`helm push <package.tgz> oci://<registry>/<path>` (with its .prov when it lies beside it)."""
        return self.run("push", package, remote, *(["--plain-http"] if plain_http else []), check=check)


def _wait(wait: bool, timeout: str | None) -> list[str]:
    return (["--wait"] if wait else []) + (["--timeout", timeout] if timeout else [])


def template(
    values_files: Iterable[str | Path] = (),
    *,
    set_values: Iterable[str] = (),
    release: str = "tf",
    namespace: str = "default",
    helm: str = "4",
    **kw,
) -> str:
    """Shorthand: render with values files and --set values."""
    return Helm(helm, namespace=namespace).template(release, Values.of(values_files, set_values), **kw)


# What Helm says when the chart refused the values (its schema, or a `fail`/`required` in a template),
# whichever verb rendered them: `template`, `install`, `upgrade`
REFUSED = ("values don't meet the specifications of the schema", "execution error at (")


def failure(verb: str, proc: subprocess.CompletedProcess) -> RenderError | HelmError:
    """The error a failed Helm command is: the chart refusing the values (RenderError, exit 4, as
    `render` says it: the same mistake, the same code in every command), else the cluster's or Helm's
    refusal (HelmError, exit 1)."""
    said = proc.stderr or proc.stdout or ""
    if any(marker in said for marker in REFUSED):
        return RenderError(clean_helm_error(said))
    return HelmError(verb, proc)


def clean_helm_error(stderr: str) -> str:
    """Helm's message without its boilerplate (`Error: execution error at (...):`, --debug hint)."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip() and "Use --debug flag" not in ln]
    text = "\n".join(lines)
    if text.startswith("Error: "):
        text = text[len("Error: ") :]
    for verb in ("INSTALLATION FAILED: ", "UPGRADE FAILED: "):  # install's and upgrade's own prefix
        text = text.removeprefix(verb)
    if text.startswith("execution error at ("):
        text = text.split("): ", 1)[-1]
    if text.startswith("values don't meet the specifications of the schema"):  # one line, each problem
        problems = [ln.strip()[2:] for ln in text.splitlines()[1:] if ln.strip().startswith("- ")]
        if problems:
            text = "values refused by the chart's schema (values.schema.json): " + "; ".join(problems)
    return text


def parse(manifest: str) -> list[dict[str, Any]]:
    """The rendered documents (empty ones dropped), in helm's order."""
    return [d for d in yaml.safe_load_all(manifest) if d]
