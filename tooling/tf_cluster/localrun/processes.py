"""A pod of the rendered release as a process on this machine: the chart's launcher around the
role's command, with the pod's env (index substituted) and its cluster addresses mapped to free
localhost ports (a TF server listens on all interfaces on its port, so distinct ports stand in for
distinct pods); started, signalled and watched here. Which pod runs when is `jobs.py`'s.

Isolation (default when the kernel allows it): each task runs in its own Linux namespaces
(sandbox.py, run as a script) and sees what its pod sees: a read-only root, its own `/tmp` and
emptyDirs, the shared claims only where its pod mounts them, the image's working directory, its
hostname, PID 1. Volumes are folders under the run directory (volumes/<claim>, pods/<pod>/<emptyDir>),
bound at their real mount paths. Namespaces rather than one container per pod: no image build
needed, no container start per task, so the demo keeps its speed.
Without namespaces (isolate=False, or a kernel that refuses them) paths in the argv and env are
rewritten to those folders instead and tasks share this machine's /tmp, which can hide a program's
shared-/tmp assumption.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import CHART, progress, requirements
from ..errors import UsageError
from ..manifests import Pod
from ..progress import TaskProgress

TRAINER_IMAGE = "tf-cluster-trainer"
# The images run-local stands in for: what `tf-cluster build` makes, and TensorFlow's official image
# (the chart's default, completed at start by its `packages` init container; the [local] extra
# gives this machine the same packages).
STANDS_IN_FOR = (TRAINER_IMAGE, "tensorflow/tensorflow")
IMAGE_PATHS = {  # what the chart mounts (and the trainer image holds) -> where this package has it
    "/opt/tf-cluster/trainers": CHART / "files" / "trainers",
}
# where the chart puts the launcher: launcher.py (a subPath of its ConfigMap) beside its package's
# folder (the package's ConfigMap); this package's chart files hold both, in that layout
LAUNCHER_MOUNT = "/opt/tf-cluster/launcher"
SANDBOX = Path(__file__).with_name("sandbox.py")
POD_VENV = "/opt/venv"  # images/Dockerfile.j2: the image's Python environment
POD_API = "/run/tf-cluster"  # isolated tasks read the leading Job's condition here
AGENT_DIR_ENV = "TF_CLUSTER_AGENT_DIR"  # the chart's tf-cluster-agent sidecar tells the task there
METRICS_PORT_ENV = "TF_CLUSTER_METRICS_PORT"  # the chart's metrics.port: the launcher serves /metrics there
IMAGE_WORKDIR = "/tmp"  # images/Dockerfile.j2: WORKDIR, and the home of its user 1000
IMAGE_ENV = {  # images/Dockerfile.j2: ENV (checked by a test)
    "PIP_NO_CACHE_DIR": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PYTHONUNBUFFERED": "1",
    "TF_USE_LEGACY_KERAS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "1",
}
HOST_ENV = ("LANG", "LC_ALL", "TZ", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
HOST_ENV_PREFIXES = ("SSL_CERT_", "REQUESTS_CA_BUNDLE", "PIP_", "CUDA_VISIBLE_DEVICES")

_sandbox_checked: dict[str, str] = {}


def sandbox_problem(python: str = sys.executable) -> str:
    """'' when tasks can run in their own namespaces here, else why not (checked once)."""
    if python not in _sandbox_checked:
        with tempfile.TemporaryDirectory(prefix="tf-cluster-probe-") as scratch:
            try:
                p = subprocess.run(
                    [python, str(SANDBOX), "--probe", scratch], capture_output=True, text=True, timeout=30
                )
                problem = "" if p.returncode == 0 else (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
            except (OSError, subprocess.TimeoutExpired) as e:
                problem = str(e)
        _sandbox_checked[python] = problem
    return _sandbox_checked[python]


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@dataclass
class Mount:
    """A pod's volume mount and the local folder standing in for its volume."""

    target: str  # mountPath, as the pod sees it
    source: str  # folder on this machine
    readonly: bool = False
    private: bool = False  # an emptyDir or the container's /tmp: gone with the pod
    volume: str = ""  # the pod's volume name


@dataclass
class Task:
    """One pod index: its process (the current pod's), what it exited with and reported. `state`
    and `failures` are its index's in the Job (jobs.py), kept here for the status table."""

    pod: Pod
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[str] | None = None
    alive: bool = False  # its process started and its exit not yet seen
    state: str = "pending"  # pending | running | backoff | succeeded | failed
    empty_dirs: list[Path] = field(default_factory=list)
    failures: int = 0
    exit_codes: list[int] = field(default_factory=list)
    started: float = 0.0
    first_start: float = 0.0
    ended: float = 0.0
    kill_at: float = 0.0  # deleted: SIGKILL then if it still runs
    reported: TaskProgress = field(default_factory=TaskProgress)
    mounts: list[Mount] = field(default_factory=list)  # isolated runs: what the sandbox binds

    @property
    def name(self) -> str:
        return self.pod.name

    @property
    def progress(self) -> dict[str, Any]:
        return self.reported.progress

    @property
    def result(self) -> dict[str, Any]:
        return self.reported.result

    @property
    def events(self) -> list[Any]:
        return self.reported.events

    @property
    def metrics_url(self) -> str:
        """Where its launcher serves its metrics (metrics.enabled: on its own localhost port, as its
        TensorFlow port is), else ''."""
        port = self.env.get(METRICS_PORT_ENV)
        return f"http://localhost:{port}/metrics" if port else ""


OnLine = Callable[[Task, str], None]


# ---------------------------------------------------------------------------- from pods to tasks


def check_runnable(pods: Iterable[Pod], allow_images: tuple[str, ...], ignore_gpus: bool) -> None:
    for p in pods:
        image = p.container.get("image", "")
        repo = image.rsplit(":", 1)[0]
        if not repo.endswith(STANDS_IN_FOR) and repo not in allow_images:
            raise UsageError(
                f"roles.{p.role} uses image {image!r}: run-local stands in only for TensorFlow's "
                f"official image and the tf-cluster trainer image (`tf-cluster build`). "
                f"Pass --allow-image {repo} to run that role's command with this machine's "
                f"Python anyway."
            )
        limits = (p.container.get("resources") or {}).get("limits") or {}
        gpus = [k for k in limits if k.endswith("/gpu")]
        if gpus and not ignore_gpus:
            raise UsageError(
                f"roles.{p.role} asks for {', '.join(gpus)}; run-local runs on this machine's "
                f"CPU only. Remove roles.{p.role}.gpus, or pass --ignore-gpus to run it on CPU."
            )


def map_addresses(pods: Iterable[Pod]) -> dict[str, str]:
    """Every cluster address in the pods' TF_CONFIG -> a free localhost port."""
    addresses: list[str] = []
    for p in pods:
        cfg = p.tf_config or {}
        for role_addrs in (cfg.get("cluster") or {}).values():
            for a in role_addrs:
                if a not in addresses:
                    addresses.append(a)
    return {a: f"localhost:{port}" for a, port in zip(addresses, free_ports(len(addresses)), strict=False)}


def localize(text: str, address_map: dict[str, str], paths: list[tuple[str, str]]) -> str:
    """Map cluster addresses and container paths to local ones in ONE pass (a mapped path must
    never be mapped again, e.g. by a /tmp mount when the run dir is in /tmp)."""
    table = dict(address_map)
    table.update(paths)
    if not table:  # a single-task release, isolated: nothing to map
        return text
    keys = sorted(table, key=len, reverse=True)
    pattern = re.compile(
        "|".join(re.escape(k) if k in address_map else rf"(?<![\w/]){re.escape(k)}(?=/|$|[\s,:\"'])" for k in keys)
    )
    return pattern.sub(lambda m: table[m.group(0)], text)


def hypertune_file(workdir: Path, task: str) -> Path:
    """Where a task that is not isolated writes its cloudml-hypertune metrics (CLOUD_ML_HP_METRIC_FILE)."""
    return workdir / "pods" / task / "hypertune" / "output.metrics"


def host_path(task: Task, path: str) -> str:
    """Where a path the task saw (e.g. /mnt/shared/model) is on this machine."""
    for m in sorted(task.mounts, key=lambda m: -len(m.target)):
        t = m.target
        if path == t or path.startswith(t.rstrip("/") + "/"):
            return m.source + path[len(t) :]
    return path


class TaskMaker:
    """Turns the chart's pods into tasks: argv, env and mounts as each pod has them, here."""

    def __init__(
        self,
        workdir: Path,
        *,
        python: str,
        isolated: bool,
        address_map: dict[str, str],
        leader_file: Path,
        poll_seconds: float,
    ) -> None:
        self.workdir, self.python, self.isolated = workdir, python, isolated
        self.address_map, self.leader_file, self.poll_seconds = address_map, leader_file, poll_seconds
        self.ports_taken = {int(a.rsplit(":", 1)[1]) for a in address_map.values()}

    def task(self, pod: Pod) -> Task:
        mounts = self.mounts(pod)
        paths = [] if self.isolated else sorted(((m.target, m.source) for m in mounts), key=lambda kv: -len(kv[0]))
        argv = [localize(a, self.address_map, paths) for a in pod.argv]
        in_venv = any(m.target == POD_VENV for m in mounts)
        python = f"{POD_VENV}/bin/{Path(self.python).name}" if in_venv else self.python
        argv = [python if a in ("python3", "python") else a for a in argv]
        env = self._env(pod, python, paths)
        if self.isolated:
            argv = self._sandboxed(pod, mounts, argv, env)
        return Task(
            pod=pod,
            argv=argv,
            env=env,
            log_path=self.workdir / "logs" / f"{pod.name}.log",
            empty_dirs=[Path(m.source) for m in mounts if m.private],
            mounts=mounts if self.isolated else [],
        )

    def mounts(self, pod: Pod) -> list[Mount]:
        """The pod's mounts, each with the local folder that stands in for its volume (made here)."""
        pod_dir = self.workdir / "pods" / pod.name
        volumes = {v["name"]: v for v in pod.pod_spec.get("volumes", [])}
        out = [Mount(k, str(v), readonly=True) for k, v in IMAGE_PATHS.items()]
        for m in pod.container.get("volumeMounts", []):
            vol = volumes.get(m["name"], {})
            readonly, private = bool(m.get("readOnly")), False
            if m["mountPath"] in IMAGE_PATHS:  # the chart's trainers: this package's copy, mounted above
                continue
            if m["mountPath"] == LAUNCHER_MOUNT or m["mountPath"].startswith(LAUNCHER_MOUNT + "/"):
                if not any(x.target == LAUNCHER_MOUNT for x in out):  # one stand-in for the launcher's mounts
                    out.append(Mount(LAUNCHER_MOUNT, str(CHART / "files"), True, False, "launcher"))
                continue
            if m.get("subPath"):
                raise UsageError(
                    f"run-local cannot mount {m['name']} at {m['mountPath']} with a subPath ({m['subPath']}): "
                    "mount the volume whole, or try it on a cluster"
                )
            if "persistentVolumeClaim" in vol:
                local = self.workdir / "volumes" / vol["persistentVolumeClaim"]["claimName"]
            elif "configMap" in vol:
                local, readonly = self.workdir / "configmaps" / vol["configMap"]["name"], True
            else:  # emptyDir: private to the pod, fresh for a replacement pod
                local, private = pod_dir / m["name"], True
            out.append(Mount(m["mountPath"], str(local), readonly, private, m["name"]))
        if self.isolated:
            out += self._container_mounts(pod_dir, out)
        for m in out:
            Path(m.source).mkdir(parents=True, exist_ok=True)
        return out

    def _container_mounts(self, pod_dir: Path, mounts: list[Mount]) -> list[Mount]:
        """What an isolated task gets besides the pod's volumes: what its image and the API give it."""
        out = []
        if not any(m.target == IMAGE_WORKDIR for m in mounts):  # the container's own /tmp
            out.append(Mount(IMAGE_WORKDIR, str(pod_dir / "tmp"), private=True))
        out.append(Mount(POD_API, str(self.leader_file.parent), readonly=True))
        venv = Path(self.python).parent.parent
        if (venv / "pyvenv.cfg").exists():  # this machine's environment where the image has its own
            out.append(Mount(POD_VENV, str(venv), readonly=True))
        if (venv / requirements.BASE_FILE).exists():  # a --requirements layer: and what it extends
            out.append(Mount(requirements.BASE_MOUNT, (venv / requirements.BASE_FILE).read_text(), readonly=True))
        return out

    def _env(self, pod: Pod, python: str, paths: list[tuple[str, str]]) -> dict[str, str]:
        if self.isolated:  # what the image gives a container, then the pod's env
            env = {k: v for k, v in os.environ.items() if k in HOST_ENV or k.startswith(HOST_ENV_PREFIXES)}
            env.update(IMAGE_ENV)
            env["PATH"] = f"{Path(python).parent}{os.pathsep}/usr/local/bin:/usr/bin:/bin"
            env["HOME"] = IMAGE_WORKDIR
        else:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "TF_CONFIG"))}
            env["PATH"] = f"{Path(self.python).parent}{os.pathsep}{env.get('PATH', '')}"
            env["TMPDIR"] = env.get("HOME", str(self.workdir))
            # tasks share this machine's /tmp: each gets its own cloudml-hypertune metrics file
            env[progress.HYPERTUNE_ENV] = str(hypertune_file(self.workdir, pod.name))
        env.update({k: localize(v, self.address_map, paths) for k, v in pod.env.items()})
        env["TF_CLUSTER_LEADER_STATUS_FILE"] = (
            f"{POD_API}/{self.leader_file.name}" if self.isolated else str(self.leader_file)
        )
        env["TF_CLUSTER_POLL_SECONDS"] = str(self.poll_seconds)
        if METRICS_PORT_ENV in env:  # every pod has the same metrics.port; here they share one network
            env[METRICS_PORT_ENV] = str(self._free_port())
        env["TF_CLUSTER_FENCE_SECONDS"] = "0"  # one machine, no API: no node to lose, nothing to fence
        # no tf-cluster-agent sidecar here (it is the API's side): the leader status file stands in
        env.pop(AGENT_DIR_ENV, None)
        return env

    def _free_port(self) -> int:
        """A free localhost port no task of this run has been given yet."""
        while True:
            (port,) = free_ports(1)
            if port not in self.ports_taken:
                self.ports_taken.add(port)
                return port

    def _sandboxed(self, pod: Pod, mounts: list[Mount], argv: list[str], env: dict[str, str]) -> list[str]:
        """The argv that runs the task through sandbox.py, in its pod's namespaces (its spec file written)."""
        pod_dir = self.workdir / "pods" / pod.name
        root = pod_dir / "root"
        root.mkdir(parents=True, exist_ok=True)
        security = pod.container.get("securityContext") or {}
        spec = {
            "root": str(root),
            "hostname": pod.hostname,
            "readonly_root": bool(security.get("readOnlyRootFilesystem")),
            "mounts": [asdict(m) for m in mounts],
            "workdir": pod.container.get("workingDir") or IMAGE_WORKDIR,
            "argv": argv,
            "env": env,
        }
        spec_path = pod_dir / "pod.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        return [self.python, str(SANDBOX), str(spec_path)]


def write_configmaps(workdir: Path, docs: list[dict[str, Any]]) -> None:
    """Each ConfigMap of the release as a folder of its keys (what a pod mounting it sees)."""
    for doc in docs:
        if doc.get("kind") == "ConfigMap":
            target = workdir / "configmaps" / doc["metadata"]["name"]
            target.mkdir(parents=True, exist_ok=True)
            for key, value in (doc.get("data") or {}).items():
                (target / key).write_text(value)


# The file a run directory holds from the moment tf-cluster made it: only such a directory is
# ever emptied for a new run (a user's folder given as --workdir is refused, never deleted).
WORKDIR_MARKER = ".tf-cluster-run"


def clean_workdir(workdir: Path, *, owned: bool = False) -> None:
    """An empty run directory at `workdir`, marked as tf-cluster's. What is there already is
    removed only when tf-cluster made it (the marker, or `owned`: the default runs/<release>,
    which older versions left unmarked) or it is an empty directory; anything else is refused
    (UsageError), untouched."""
    if workdir.is_dir() and (owned or (workdir / WORKDIR_MARKER).is_file()):
        shutil.rmtree(workdir)
    elif workdir.is_dir() and not any(workdir.iterdir()):
        workdir.rmdir()
    elif workdir.exists():
        what = "a file" if not workdir.is_dir() else f"a directory tf-cluster did not make (it has no {WORKDIR_MARKER})"
        raise UsageError(
            f"{workdir} is {what}: a run directory is emptied before each run, so tf-cluster only reuses "
            "one it made itself. Give a new or empty directory (or leave the option out for the default)"
        )
    workdir.mkdir(parents=True)
    (workdir / WORKDIR_MARKER).write_text("made by tf-cluster: emptied before its next run\n")


# ---------------------------------------------------------------------------- processes


def spawn(task: Task, on_line: OnLine, *, replacement: bool) -> None:
    """Start the task's pod: its process, in its own session; its output pumped to its log."""
    task.log_path.parent.mkdir(parents=True, exist_ok=True)
    if replacement:  # a replacement pod starts with empty emptyDirs, as in Kubernetes
        for d in task.empty_dirs:
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
    task.proc = subprocess.Popen(
        task.argv,
        env=task.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,
    )
    task.alive, task.kill_at = True, 0.0
    task.started = time.monotonic()
    task.first_start = task.first_start or task.started
    threading.Thread(target=_pump, args=(task, task.proc, on_line), daemon=True).start()


def _pump(task: Task, proc: subprocess.Popen[str], on_line: OnLine) -> None:
    with open(task.log_path, "a") as log:
        assert proc.stdout is not None  # stdout=PIPE
        for line in proc.stdout:
            line = line.rstrip("\n")
            log.write(line + "\n")
            task.reported.feed(line)
            on_line(task, line)


def reap(task: Task, now: float) -> int | None:
    """The exit code of the task's process if it ended since the last look (128+signal when
    killed), else None."""
    if not task.alive or task.proc is None or task.proc.poll() is None:
        return None
    code = task.proc.returncode
    code = 128 - code if code < 0 else code
    task.alive, task.ended = False, now
    task.exit_codes.append(code)
    return code


def signal_pod(task: Task, sig: int) -> None:
    """Signal the pod as a node would: SIGTERM or SIGINT to its launcher alone (the kubelet's, to
    the container's PID 1: the launcher forwards it to the command's process group), any other
    signal (SIGKILL on the pod's end, SIGSTOP, ...) to every process of its session: the launcher,
    the command's group, what it left."""
    if task.proc is None:
        return
    if sig in (signal.SIGTERM, signal.SIGINT):
        targets = [task.proc.pid]
    else:
        targets = [-group for group in session_groups(task.proc.pid)]  # os.kill(-g) signals group g
    for target in targets:
        try:
            os.kill(target, sig)
        except (ProcessLookupError, PermissionError):
            pass


def session_groups(sid: int) -> set[int]:
    """The process groups of session `sid` (a pod's: spawn starts each in a session of its own)."""
    groups = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
            if int(fields[3]) == sid:
                groups.add(int(fields[2]))
    return groups


def delete(task: Task, now: float, grace: float) -> None:
    """Delete the pod: SIGTERM now, SIGKILL once `grace` seconds passed (`kill_overdue`)."""
    if task.alive and not task.kill_at:
        signal_pod(task, signal.SIGTERM)
        task.kill_at = now + grace


def kill_overdue(task: Task, now: float) -> None:
    if task.alive and task.kill_at and now >= task.kill_at:
        signal_pod(task, signal.SIGKILL)


def stop_now(task: Task, grace: float) -> None:
    """SIGTERM, up to `grace` seconds, SIGKILL: the task's process is gone on return."""
    if task.proc is None or task.proc.poll() is not None:
        return
    signal_pod(task, signal.SIGTERM)
    try:
        task.proc.wait(grace)
    except subprocess.TimeoutExpired:
        signal_pod(task, signal.SIGKILL)
        task.proc.wait()
