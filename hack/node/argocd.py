"""Argo CD 3.6 on the node, run the way Argo CD's own Procfile runs it outside a cluster:
its application controller and repo server (one binary, chosen by ARGOCD_BINARY_NAME),
Redis from Debian, and the Applications' sources: a git server over smart HTTP and an OCI
registry (CNCF distribution, built from its Go module).

Reconciliation is shortened to ARGOCD_RESYNC seconds (Argo CD's default is 120 s) so a test
can watch many reconciliation cycles; resource health is persisted in the Application's
status (--persist-resource-health) so tests and users read per-Job health from it.
"""

from __future__ import annotations

import os
import sys
import urllib.request
from pathlib import Path

from .config import (
    CACHE,
    CONTROLLER_METRICS,
    GIT_PORT,
    HERE,
    KUBECONFIG,
    REDIS_PORT,
    REGISTRY_PORT,
    REPO_METRICS,
    REPO_PORT,
    ROOT,
    STATE,
)
from .proc import NodeError, kubectl, say, start, wait_for

ARGOCD_VERSION = os.environ.get("ARGOCD_VERSION", "3.6.1")
ARGOCD_DIR = Path(os.environ.get("ARGOCD_DIR") or CACHE / f"argocd-{ARGOCD_VERSION}")
NAMESPACE = "argocd"
RESYNC = int(os.environ.get("ARGOCD_RESYNC", "5"))
REGISTRY_DIR = Path(os.environ.get("REGISTRY_DIR") or CACHE / "registry-debian")  # build.sh: Debian's
REGISTRY = f"127.0.0.1:{REGISTRY_PORT}"  # plain HTTP: `helm push --plain-http`, Argo CD `insecureOCIForceHttp`
GIT_ROOT = STATE / "git"
GIT_URL = f"http://127.0.0.1:{GIT_PORT}"

SETUP = """\
apiVersion: v1
kind: Namespace
metadata: {name: argocd}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: argocd-cm, namespace: argocd, labels: {app.kubernetes.io/part-of: argocd}}
data: {}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: argocd-rbac-cm, namespace: argocd, labels: {app.kubernetes.io/part-of: argocd}}
data: {}
---
apiVersion: v1
kind: Secret
metadata: {name: argocd-secret, namespace: argocd, labels: {app.kubernetes.io/part-of: argocd}}
type: Opaque
---
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {name: default, namespace: argocd}
spec:
  sourceRepos: ["*"]
  destinations: [{server: "*", namespace: "*"}]
  clusterResourceWhitelist: [{group: "*", kind: "*"}]
"""


def up_registry() -> None:
    """The OCI registry (Argo CD's OCI source, and the charts' OCI scenarios without it)."""
    config = STATE / "registry.yml"
    config.write_text(
        "version: 0.1\nlog: {level: info}\n"
        f"storage: {{filesystem: {{rootdirectory: {STATE / 'registry'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: {REGISTRY}}}\n"
    )
    start("registry", [REGISTRY_DIR / "registry", "serve", config])
    wait_for(
        "the OCI registry",
        lambda: urllib.request.urlopen(f"http://{REGISTRY}/v2/", timeout=2).status == 200,
        30,
        "registry",
    )


def up_argocd() -> None:
    """Argo CD's two components, with their Redis, the git server they read and their CRDs."""
    if not (ARGOCD_DIR / "argocd").exists():
        raise NodeError(f"Argo CD is not built in {ARGOCD_DIR}: run hack/node/build.sh argocd")
    for name in ("argocd-application-controller", "argocd-repo-server"):
        link = ARGOCD_DIR / name
        if not link.exists():
            link.symlink_to("argocd")
    start("redis", ["redis-server", "--bind", "127.0.0.1", "--port", REDIS_PORT, "--save", "", "--appendonly", "no"])
    GIT_ROOT.mkdir(parents=True, exist_ok=True)
    start("git_http", [sys.executable, HERE / "git_http.py", GIT_ROOT, GIT_PORT])
    # The CRDs are too big for client-side apply's last-applied annotation.
    kubectl("apply", "--server-side", "--force-conflicts", "-f", ARGOCD_DIR / "crds")
    wait_for(
        "Argo CD's CRDs established",
        lambda: (
            kubectl(
                "wait",
                "--for=condition=Established",
                "crd/applications.argoproj.io",
                "crd/appprojects.argoproj.io",
                "--timeout=5s",
                check=False,
            ).returncode
            == 0
        ),
        60,
    )
    kubectl("apply", "-f", "-", input=SETUP)
    for d in ("tls", "ssh", "gpg", "home"):
        (STATE / "argocd" / d).mkdir(parents=True, exist_ok=True)
    env = {
        "ARGOCD_FAKE_IN_CLUSTER": "true",  # the in-cluster destination = this kubeconfig
        "KUBECONFIG": str(KUBECONFIG),
        "ARGOCD_TLS_DATA_PATH": str(STATE / "argocd" / "tls"),
        "ARGOCD_SSH_DATA_PATH": str(STATE / "argocd" / "ssh"),
        "ARGOCD_GNUPGHOME": str(STATE / "argocd" / "gpg"),
        "ARGOCD_GPG_ENABLED": "false",
        "HOME": str(STATE / "argocd" / "home"),
        # the repo server runs `helm template`: the pinned Helm 4 of `make setup` (Argo CD 3.6.1 ships 4.3.1)
        # and git-verify-wrapper.sh, which Argo CD's image has on PATH
        "PATH": f"{ARGOCD_DIR}:{ROOT / '.tools' / 'bin'}:{os.environ.get('PATH', '')}",
    }
    common = ["--redis", f"127.0.0.1:{REDIS_PORT}", "--loglevel", "info", "--logformat", "text"]
    start(
        "argocd-repo-server",
        [
            ARGOCD_DIR / "argocd-repo-server",
            "--port",
            REPO_PORT,
            "--metrics-port",
            REPO_METRICS,
            *common,
        ],
        env=env,
    )
    start(
        "argocd-application-controller",
        [
            ARGOCD_DIR / "argocd-application-controller",
            "--repo-server",
            f"127.0.0.1:{REPO_PORT}",
            "--metrics-port",
            CONTROLLER_METRICS,
            "--app-resync",
            RESYNC,
            "--app-resync-jitter",
            0,
            "--persist-resource-health",
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            KUBECONFIG,
            *common,
        ],
        env=env,
    )
    for name, port in (("argocd-repo-server", REPO_METRICS), ("argocd-application-controller", CONTROLLER_METRICS)):
        wait_for(
            f"{name} serving",
            lambda port=port: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).status == 200,
            90,
            name,
        )
    say(f"Argo CD {ARGOCD_VERSION} up (git {GIT_URL}, OCI registry {REGISTRY}, reconciliation every {RESYNC}s)")
