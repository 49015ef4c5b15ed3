"""An image's ENTRYPOINT and CMD, for `tf-cluster from-tfjob` (a TFJob container that sets no
`command` ran them; the chart's launcher starts the command itself, so it needs them).

`lookup` reads them from the local image store (podman, else docker), trying the name as given and
as podman stores it (`docker.io/...`, `docker.io/library/...`), and else from the registry's image
config over the OCI distribution API: the manifest (linux/amd64 of an image index), then the config
blob, with the registry's bearer-token challenge answered from the credentials podman and docker
keep (`auths` entries' base64 `auth`). Each registry lookup has a deadline and never hangs: it
runs in a daemon thread (name resolution ignores socket timeouts). Stdlib only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path

from .errors import TfClusterError

REGISTRY_TIMEOUT = 10.0  # seconds for one image's whole registry lookup
LOCAL_TIMEOUT = 30.0  # seconds for one `podman image inspect` (the store may be locked by a build)
MAX_DOCUMENT = 4 << 20  # manifests and config blobs are a few KiB; never read more than this
PLATFORM = ("linux", "amd64")
DOCKER_HUB, DOCKER_HUB_API = "docker.io", "registry-1.docker.io"
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
ACCEPT = ", ".join((*MANIFEST_TYPES, *INDEX_TYPES, "application/vnd.docker.distribution.manifest.v1+prettyjws"))
# Errors a registry conversation can raise: sockets/TLS/HTTP status (OSError), bodies that are not
# the JSON documents expected (ValueError, LookupError, TypeError), broken HTTP (HTTPException).
NETWORK_ERRORS = (OSError, ValueError, LookupError, TypeError, HTTPException)


@dataclass(frozen=True)
class ImageConfig:
    """An image's ENTRYPOINT and CMD, and where they were read."""

    image: str  # as the manifest names it
    entrypoint: list[str]
    cmd: list[str]
    source: str  # "the local podman store (docker.io/kubeflow/x:latest)", "the registry https://..."

    def command(self, args: list[str]) -> tuple[list[str], list[str]]:
        """(command, args) of a container that sets no command, as Kubernetes runs it:
        ENTRYPOINT + (the container's args if it gives any, else CMD)."""
        return container_command(self.entrypoint, self.cmd, args)

    def describe(self) -> str:
        parts = [f"ENTRYPOINT {self.entrypoint}"] if self.entrypoint else ["no ENTRYPOINT"]
        if self.cmd:
            parts.append(f"CMD {self.cmd}")
        return f"{', '.join(parts)} from {self.source}"


def container_command(entrypoint: list[str], cmd: list[str], args: list[str]) -> tuple[list[str], list[str]]:
    """Kubernetes: a container's `args` replace the image's CMD; with no ENTRYPOINT they are the
    command. Returned as the chart's (command, args): their concatenation is what runs."""
    if not args:
        return [*entrypoint, *cmd], []
    if entrypoint:
        return list(entrypoint), list(args)
    return list(args), []


@dataclass(frozen=True)
class Reference:
    """An image name as a registry reads it (the Docker rules podman and containerd follow)."""

    registry: str  # docker.io, quay.io, 127.0.0.1:5000
    repository: str  # library/ubuntu, kubeflow/tf-dist-mnist-test
    tag: str = ""
    digest: str = ""

    @property
    def reference(self) -> str:
        """What the manifest URL names: the digest when pinned, else the tag."""
        return self.digest or self.tag

    def __str__(self) -> str:
        return (
            f"{self.registry}/{self.repository}"
            + (f":{self.tag}" if self.tag else "")
            + (f"@{self.digest}" if self.digest else "")
        )


def registry_host(name: str) -> str:
    """The registry host a reference names, "" when it names none (Docker's rule: a first path
    component with a dot or a port, or localhost)."""
    first, sep, _ = name.partition("/")
    return first if sep and ("." in first or ":" in first or first == "localhost") else ""


def parse(image: str) -> Reference:
    name, _, digest = image.strip().partition("@")
    tag = ""
    if name.rfind(":") > name.rfind("/"):
        name, tag = name.rsplit(":", 1)
    first, _, rest = name.partition("/")
    if registry_host(name):
        registry, repository = first, rest
    else:
        registry, repository = DOCKER_HUB, name
    if registry in ("index.docker.io", DOCKER_HUB_API):
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    if not repository or not re.fullmatch(r"[a-z0-9][a-z0-9._/-]*", repository):
        raise ValueError(f"{image!r} is not an image name")
    return Reference(registry, repository, tag or ("" if digest else "latest"), digest)


def local_names(image: str) -> list[str]:
    """The name as given, then as podman stores a pulled image (docker.io/[library/]NAME:TAG)."""
    names = [image]
    try:
        full = str(parse(image))
    except ValueError:
        return names
    return names if full == image else [*names, full]


# ------------------------------------------------------------------ looking
class LookupFailed(Exception):
    """One place did not give the ENTRYPOINT/CMD; the message says why."""


@dataclass(eq=False)
class NotFound(TfClusterError):
    """Neither the local store nor the registry gave the image's ENTRYPOINT/CMD."""

    image: str
    tried: list[str] = field(default_factory=list)  # "the local podman store: ...", "the registry ...: ..."
    plain_http: str = ""  # a registry whose TLS handshake failed: maybe it speaks plain HTTP

    def __str__(self) -> str:
        return f"{self.image}: no ENTRYPOINT or CMD found; looked in " + "; ".join(self.tried)


def lookup(image: str, *, insecure: Collection[str] = (), timeout: float = REGISTRY_TIMEOUT) -> ImageConfig:
    """The image's ENTRYPOINT and CMD: from the local store, else from its registry (plain HTTP for
    the `insecure` HOST[:PORT]s). Raises NotFound saying where it looked and what each answered."""
    failed = NotFound(image)
    tool = local_tool()
    if tool is None:
        failed.tried.append("the local image store: neither podman nor docker is installed")
    else:
        try:
            return from_local_store(image, tool)
        except LookupFailed as e:
            failed.tried.append(f"the local {tool} store: {e}")
    try:
        ref = parse(image)
    except ValueError as e:
        failed.tried.append(f"no registry: {e}")
        raise failed from None
    base = registry_url(ref.registry, insecure)
    try:
        return from_registry(image, ref, base, timeout=timeout)
    except LookupFailed as e:
        failed.tried.append(f"the registry {base}: {e}")
        if "SSL" in str(e) and base.startswith("https:"):
            failed.plain_http = ref.registry
    raise failed


def local_tool() -> str | None:
    """podman, else docker (the tool whose store a `podman build`/`docker pull` filled)."""
    return next((t for t in ("podman", "docker") if shutil.which(t)), None)


def from_local_store(image: str, tool: str) -> ImageConfig:
    errors = []
    for name in local_names(image):
        argv = [tool, "image", "inspect", *(["--format", "json"] if tool == "podman" else []), name]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=LOCAL_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise LookupFailed(f"`{' '.join(argv)}` gave no answer in {LOCAL_TIMEOUT:.0f} s") from None
        if r.returncode != 0:
            lines = r.stderr.strip().splitlines() or [f"exit {r.returncode}"]
            unknown = re.search(r"image not known|no such (image|object)", lines[-1], re.IGNORECASE)
            errors.append(name if unknown else f"{name} ({lines[-1].removeprefix('Error: ')})")
            continue
        try:
            (found,) = json.loads(r.stdout)
            config = found.get("Config") or {}
        except (ValueError, TypeError, AttributeError) as e:
            raise LookupFailed(f"`{' '.join(argv)}` printed no image: {e}") from None
        tags = found.get("RepoTags") or []
        stored = name if name in tags or not tags else tags[0]
        return checked(image, config, f"the local {tool} store ({stored})")
    raise LookupFailed("no image " + " or ".join(errors))


def checked(image: str, config: dict, source: str) -> ImageConfig:
    """An image config's Entrypoint/Cmd (either may be null); neither set is no answer."""
    entrypoint, cmd = config.get("Entrypoint") or [], config.get("Cmd") or []
    if not all(isinstance(x, list) and all(isinstance(s, str) for s in x) for x in (entrypoint, cmd)):
        raise LookupFailed(f"{source}: Entrypoint/Cmd are not lists of strings: {entrypoint!r} {cmd!r}")
    if not entrypoint and not cmd:
        raise LookupFailed(f"{source}: the image has no ENTRYPOINT and no CMD")
    return ImageConfig(image, list(entrypoint), list(cmd), source)


# ------------------------------------------------------------------ the registry
def registry_url(registry: str, insecure: Collection[str] = ()) -> str:
    """https://HOST (Docker Hub's API host for docker.io); http:// for the `insecure` ones."""
    plain = {parse_host(h) for h in insecure}
    scheme = "http" if registry in plain else "https"
    return f"{scheme}://{DOCKER_HUB_API if registry == DOCKER_HUB else registry}"


def parse_host(host: str) -> str:
    """HOST[:PORT] as given to --insecure-registry (a scheme or a trailing slash is dropped)."""
    host = re.sub(r"^[a-z]+://", "", host.strip()).rstrip("/")
    return DOCKER_HUB if host in ("index.docker.io", DOCKER_HUB_API) else host


def from_registry(image: str, ref: Reference, base: str, *, timeout: float = REGISTRY_TIMEOUT) -> ImageConfig:
    """Manifest -> config blob over the distribution API, within `timeout` seconds in all."""
    result: list[ImageConfig | BaseException] = []
    deadline = time.monotonic() + timeout

    def work() -> None:
        try:
            result.append(Registry(ref, base, deadline).image_config(image))
        except (LookupFailed, *NETWORK_ERRORS) as e:
            result.append(e)

    thread = threading.Thread(target=work, name=f"registry {ref.registry}", daemon=True)
    thread.start()
    thread.join(timeout + 1)
    if not result:
        raise LookupFailed(f"no answer within {timeout:.0f} s")
    (out,) = result
    if isinstance(out, ImageConfig):
        return out
    raise LookupFailed(describe_error(out, timeout)) from None


def describe_error(e: BaseException, timeout: float) -> str:
    if isinstance(e, LookupFailed):
        return str(e)
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason} for {e.url}"
    if isinstance(e, urllib.error.URLError):
        return f"{e.reason}"
    if isinstance(e, TimeoutError):
        return f"no answer within {timeout:.0f} s"
    return f"{type(e).__name__}: {e}"


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    file: Path

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


def auth_files() -> list[Path]:
    """Where podman and docker keep registry logins, in the order podman reads them (then docker's)."""
    files = []
    if os.environ.get("REGISTRY_AUTH_FILE"):
        files.append(Path(os.environ["REGISTRY_AUTH_FILE"]))
    if os.environ.get("XDG_RUNTIME_DIR"):
        files.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    files.append(Path.home() / ".config" / "containers" / "auth.json")
    files.append(Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json")
    return files


def auth_key(key: str) -> str:
    """An `auths` key as HOST[/PATH]: docker writes https://index.docker.io/v1/ for Docker Hub."""
    key = re.sub(r"^[a-z]+://", "", key.strip()).rstrip("/")
    key = re.sub(r"/v[12]$", "", key)
    host, sep, path = key.partition("/")
    return parse_host(host) + sep + path


def credentials(registry: str, repository: str) -> Credentials | None:
    """The first login for REGISTRY/REPOSITORY (most specific `auths` key first) in auth_files()."""
    parts = repository.split("/")
    keys = [f"{registry}/{'/'.join(parts[:n])}" for n in range(len(parts), 0, -1)] + [registry]
    for path in auth_files():
        try:
            auths = json.loads(path.read_text()).get("auths") or {}
            entries = {auth_key(k): v for k, v in auths.items() if isinstance(v, dict)}
        except (OSError, ValueError, AttributeError):
            continue
        for key in keys:
            encoded = (entries.get(key) or {}).get("auth")
            if encoded:
                try:
                    user, _, password = base64.b64decode(encoded).decode().partition(":")
                except ValueError:
                    continue
                return Credentials(user, password, path)
    return None


def challenge(header: str) -> tuple[str, dict[str, str]]:
    """WWW-Authenticate: `Bearer realm="...",service="...",scope="..."` -> ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', rest))


class Registry:
    """One image's manifest and config blob from one registry, with the deadline shared."""

    def __init__(self, ref: Reference, base: str, deadline: float):
        self.ref, self.base, self.deadline = ref, base, deadline
        self.authorization = ""
        self.creds = credentials(ref.registry, ref.repository)

    def image_config(self, image: str) -> ImageConfig:
        manifest = self.json(f"manifests/{self.ref.reference}", ACCEPT)
        platform = ""
        if "manifests" in manifest:  # an image index: linux/amd64's manifest
            digest, platform = pick_platform(manifest)
            manifest = self.json(f"manifests/{digest}", ", ".join(MANIFEST_TYPES))
        source = f"the registry {self.base} ({self.ref}{', ' + platform + ' of its index' if platform else ''})"
        if manifest.get("schemaVersion") == 1:  # a Docker schema 1 manifest carries the config itself
            config = json.loads(manifest["history"][0]["v1Compatibility"]).get("config") or {}
            return checked(image, config, source)
        digest = manifest["config"]["digest"]
        blob = self.get(f"blobs/{digest}", "*/*")
        algorithm, _, hexdigest = digest.partition(":")
        if algorithm == "sha256" and hashlib.sha256(blob).hexdigest() != hexdigest:
            raise LookupFailed(f"the config blob {digest} does not match its digest")
        return checked(image, json.loads(blob).get("config") or {}, source)

    def json(self, path: str, accept: str) -> dict:
        doc = json.loads(self.get(path, accept))
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: not a JSON object")
        return doc

    def get(self, path: str, accept: str) -> bytes:
        url = f"{self.base}/v2/{self.ref.repository}/{path}"
        try:
            return self.fetch(url, accept, self.authorization)
        except urllib.error.HTTPError as e:
            if e.code != 401 or self.authorization:
                raise
            self.authorization = self.authorize(e.headers.get("WWW-Authenticate") or "")
            return self.fetch(url, accept, self.authorization)

    def fetch(self, url: str, accept: str, authorization: str = "") -> bytes:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(url)
        req = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "tf-cluster"})
        if authorization:  # not sent on to a blob's redirect (a CDN's signed URL refuses it)
            req.add_unredirected_header("Authorization", authorization)
        with urllib.request.urlopen(req, timeout=left) as resp:
            body = resp.read(MAX_DOCUMENT + 1)
        if len(body) > MAX_DOCUMENT:
            raise ValueError(f"{url}: more than {MAX_DOCUMENT} bytes")
        return body

    def authorize(self, header: str) -> str:
        """The Authorization header answering a 401's challenge: a bearer token from the realm
        (asked with the login, if any), or the login itself for Basic."""
        scheme, params = challenge(header)
        login = (
            f" (login from {self.creds.file})"
            if self.creds
            else " (no login for it in " + ", ".join(str(p) for p in auth_files()) + ")"
        )
        if scheme == "basic":
            if not self.creds:
                raise LookupFailed(f"HTTP 401: the registry asks for a login{login}")
            return self.creds.basic()
        if scheme != "bearer" or not params.get("realm"):
            raise LookupFailed(f"HTTP 401 with an authentication challenge tf-cluster does not know: {header!r}")
        query = {"service": params.get("service", ""), "scope": params.get("scope") or self.scope()}
        url = params["realm"] + ("&" if "?" in params["realm"] else "?") + urllib.parse.urlencode(query)
        try:
            doc = json.loads(self.fetch(url, "application/json", self.creds.basic() if self.creds else ""))
        except urllib.error.HTTPError as e:
            raise LookupFailed(
                f"the token service {params['realm']} refused: HTTP {e.code} {e.reason}{login}"
            ) from None
        token = doc.get("token") or doc.get("access_token")
        if not token:
            raise LookupFailed(f"the token service {params['realm']} gave no token")
        return f"Bearer {token}"

    def scope(self) -> str:
        return f"repository:{self.ref.repository}:pull"


def pick_platform(index: dict) -> tuple[str, str]:
    """The digest of an image index's linux/amd64 manifest, and that platform."""
    platforms = []
    for entry in index.get("manifests") or []:
        p = entry.get("platform") or {}
        platforms.append(f"{p.get('os')}/{p.get('architecture')}")
        if (p.get("os"), p.get("architecture")) == PLATFORM:
            return entry["digest"], "/".join(PLATFORM)
    raise LookupFailed(f"its image index has no {'/'.join(PLATFORM)} image (it has {', '.join(platforms) or 'none'})")
