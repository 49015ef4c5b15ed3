"""tf-cluster's notebook side: the kernel as the cluster's chief, and the notebook pod's set-up.

Standard library only (it shares the launcher's API client); the chart mounts it with the
launcher and puts it on the notebook's PYTHONPATH.

In a notebook (the chart's `notebook.coordinator: true`, strategy parameterServer):

    import tf_cluster_notebook as tfc
    session = tfc.connect()     # the ps and worker servers now serve this kernel
    ...                         # ParameterServerStrategy + ClusterCoordinator, as usual
    session.done()              # the servers stop (their Jobs complete)

`connect()` renews a heartbeat in the ConfigMap named like the chief Job every few seconds from a
daemon thread: while the kernel lives, the servers serve it. `done()` marks it done; a kernel
that dies (or is culled) stops renewing it, and the servers stop on their own after
`notebook.heartbeatTimeoutSeconds` (tf_cluster_launcher/leader.py, heartbeat_condition). A ConfigMap, not a Lease:
Argo CD never syncs Leases (they are in its built-in resource exclusions).

In the notebook pod's init container:

    python3 tf_cluster_notebook.py prepare

writes JupyterLab's token to TF_CLUSTER_TOKEN_FILE from the Secret TF_CLUSTER_TOKEN_SECRET
(key TF_CLUSTER_TOKEN_KEY); when TF_CLUSTER_TOKEN_CREATE=true and the Secret has no token yet
it makes one and stores it there first (once: the chart renders that Secret without data, so
no token is in any manifest and every render is the same). It also copies the example
notebooks (/opt/tf-cluster/notebooks: the chart's, or the image's) into the notebook root once,
and answers JupyterLab's question about jupyter.org's news with "no" (quiet_jupyterlab).
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import secrets
import shutil
import socket
import sys
import threading
import time
import urllib.error
from typing import Any

from tf_cluster_launcher import kubeapi

EXAMPLES = "/opt/tf-cluster/notebooks"


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def say(msg: str) -> None:
    sys.stderr.write("[tf-cluster notebook] %s\n" % msg)
    sys.stderr.flush()


def micro_time(t: float | None = None) -> str:
    """The API's MicroTime: RFC 3339 with exactly six fractional digits, UTC."""
    d = datetime.datetime.fromtimestamp(time.time() if t is None else t, datetime.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def heartbeat_path() -> str:
    name = env("TF_CLUSTER_HEARTBEAT")
    if not name:
        raise RuntimeError(
            "TF_CLUSTER_HEARTBEAT is not set: this notebook is not the coordinator of a "
            "tf-cluster release (set notebook.coordinator=true with strategy parameterServer)"
        )
    return "/api/v1/namespaces/%s/configmaps/%s" % (env("TF_CLUSTER_NAMESPACE", "default"), name)


class Session:
    """The kernel's hold on the servers: a heartbeat in the coordinator's ConfigMap."""

    def __init__(self, interval: float | None = None) -> None:
        self.interval = float(interval or env("TF_CLUSTER_HEARTBEAT_SECONDS", "10"))
        self.identity = "%s/kernel-%d" % (socket.gethostname(), os.getpid())
        self.stopped = threading.Event()
        self.last_error: Exception | None = None
        self.beats = 0
        self._beat(first=True)  # fails loudly here, in the cell, when the heartbeat cannot be written
        self.thread = threading.Thread(target=self._run, name="tf-cluster-heartbeat", daemon=True)
        self.thread.start()

    def _beat(self, first: bool = False) -> None:
        data: dict[str, Any] = {"holderIdentity": self.identity, "renewTime": micro_time()}
        if first:  # a new session: clear a done mark a previous kernel of this run left
            data.update(acquireTime=data["renewTime"], done=None)
        kubeapi.api(heartbeat_path(), method="PATCH", body={"data": data})
        self.beats += 1

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self._beat()
                self.last_error = None
            except (urllib.error.URLError, OSError, ValueError) as e:
                if self.last_error is None:
                    say("heartbeat failed (%s); retrying every %ss" % (e, self.interval))
                self.last_error = e

    def done(self) -> None:
        """Tell the ps and worker servers this session is over: they stop and their Jobs complete."""
        self.stopped.set()
        kubeapi.api(heartbeat_path(), method="PATCH", body={"data": {"done": micro_time(), "holderIdentity": None}})
        say("session done: the ps and worker servers stop within %ss" % env("TF_CLUSTER_POLL_SECONDS", "5"))

    def __repr__(self) -> str:
        state = "done" if self.stopped.is_set() else "alive (%d heartbeats)" % self.beats
        return "<tf-cluster session %s, %s>" % (self.identity, state)


def connect(interval: float | None = None) -> Session:
    """Become the coordinator the release's ps and worker servers serve; returns the Session."""
    session = Session(interval)
    cluster = json.loads(env("TF_CONFIG", "{}")).get("cluster", {})
    say(
        "coordinator of %s; heartbeat every %ss"
        % (", ".join("%d %s" % (len(v), k) for k, v in sorted(cluster.items())), session.interval)
    )
    return session


def tensorboard_url() -> str:
    """Where this notebook's user reaches TensorBoard (the chart's notebook.tensorboardUrl)."""
    return env("TF_CLUSTER_TENSORBOARD_URL")


# ------------------------------------------------------------ the pod's set-up


def secret_token(secret: str, key: str) -> tuple[str, Any, str]:  # the token, the Secret, its path
    path = "/api/v1/namespaces/%s/secrets/%s" % (env("TF_CLUSTER_NAMESPACE", "default"), secret)
    obj = kubeapi.api(path)
    data = obj.get("data") or {}
    if data.get(key):
        return base64.b64decode(data[key]).decode().strip(), obj, path
    return "", obj, path


def ensure_token() -> str:
    secret, key = env("TF_CLUSTER_TOKEN_SECRET"), env("TF_CLUSTER_TOKEN_KEY", "token")
    create = env("TF_CLUSTER_TOKEN_CREATE") == "true"
    for _ in range(5):
        try:
            token, obj, path = secret_token(secret, key)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                raise SystemExit(
                    "Secret %s does not exist. Create it (kubectl create secret generic %s "
                    "--from-literal=%s=$(python3 -c 'import secrets; print(secrets.token_hex(24))')) "
                    "or unset notebook.auth.existingSecret so the chart makes one" % (secret, secret, key)
                ) from None
            raise
        if token:
            return token
        if not create:
            raise SystemExit(
                "Secret %s has no key %r: add it (kubectl patch secret %s --type merge -p "
                '\'{"stringData":{"%s":"<token>"}}\') or set notebook.auth.existingSecretKey'
                % (secret, key, secret, key)
            )
        token = secrets.token_hex(24)
        body = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "data": {key: base64.b64encode(token.encode()).decode()},
        }
        try:
            kubeapi.api(path, method="PATCH", body=body)
            say("made the notebook's token and stored it in Secret %s (key %s)" % (secret, key))
            return token
        except urllib.error.HTTPError as e:
            if e.code != 409:  # another pod stored one first: read that one
                raise
    raise SystemExit("could not store a token in Secret %s (conflicting writers)" % secret)


def copy_examples(root: str) -> None:
    if not os.path.isdir(EXAMPLES):
        return
    for name in sorted(os.listdir(EXAMPLES)):
        target = os.path.join(root, name)
        if name.endswith(".ipynb") and not os.path.exists(target):
            shutil.copyfile(os.path.join(EXAMPLES, name), target)
            say("example notebook %s" % target)


# JupyterLab asks every new user whether to fetch jupyter.org's news, and checks for updates: pods
# often have no internet, and the question greets each user. The answer "no" as the user's own
# setting (an image's overrides.json cannot be written from here), unless a setting is there.
QUIET = {"fetchNews": "false", "checkForUpdates": False}


def quiet_jupyterlab() -> None:
    base = env("JUPYTERLAB_SETTINGS_DIR") or os.path.join(env("HOME", "/tmp"), ".jupyter", "lab", "user-settings")
    path = os.path.join(base, "@jupyterlab", "apputils-extension", "notification.jupyterlab-settings")
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(QUIET, f)


def prepare() -> int:
    token = ensure_token()
    out = env("TF_CLUSTER_TOKEN_FILE", "/tmp/.tf-cluster/jupyter-token")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    root = env("TF_CLUSTER_NOTEBOOK_ROOT", "/tmp/notebooks")
    os.makedirs(root, exist_ok=True)
    copy_examples(root)
    quiet_jupyterlab()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["prepare"]:
        sys.exit("usage: tf_cluster_notebook.py prepare")
    sys.exit(prepare())
