"""Run the pods a rendered release would create as local processes.

Each pod of each Indexed Job becomes one process (the chart's launcher around
the role's command), with the pod's env (index substituted) and its cluster
addresses mapped to free localhost ports (a TF server listens on all interfaces
on its port, so distinct ports stand in for distinct pods).

Isolation (default when the kernel allows it): each task runs in its own Linux
namespaces (sandbox.py) and sees what its pod sees: a read-only root, its own
`/tmp` and emptyDirs, the shared claims only where its pod mounts them, the
image's working directory, its hostname, PID 1. Volumes are folders under the
run directory (volumes/<claim>, pods/<pod>/<emptyDir>), bound at their real
mount paths. Namespaces rather than one container per pod: no image build
needed, no container start per task, so the demo keeps its speed.
Without namespaces (isolate=False, or a kernel that refuses them) paths in the
argv and env are rewritten to those folders instead and tasks share this
machine's /tmp, which can hide a program's shared-/tmp assumption.

Job semantics follow Kubernetes:
an index that fails is restarted until it exceeds `backoffLimitPerIndex`; an
exit code listed in a `FailJob` rule of the `podFailurePolicy` fails the Job at
once; a Job is Complete when every index succeeded. The leading Job's condition
is written to a file the launchers of stopping roles poll, as they would poll
the API server in a cluster.
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
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import CHART, IMAGES, progress, requirements
from .errors import ToolMissing, UsageError
from .manifests import Pod
from .progress import TaskProgress

TRAINER_IMAGE = "tf-cluster-trainer"
IMAGE_PATHS = {  # what the trainer image holds -> where this package (or checkout) has it
    "/opt/tf-cluster/trainers": IMAGES / "trainers",
}
LAUNCHER_MOUNT = "/opt/tf-cluster/launcher"
SANDBOX = Path(__file__).with_name("sandbox.py")
POD_VENV = "/opt/venv"  # images/Dockerfile.j2: the image's Python environment
POD_API = "/run/tf-cluster"  # isolated tasks read the leading Job's condition here
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

STORAGE_VOLUMES = ("data", "checkpoints", "logs")  # the chart's storage.<volume> (_storage.tpl)
HOUSEKEEPING = {"__pycache__", ".keras", ".cache", ".config"}  # TF/Keras/pip own files in $HOME=/tmp
_sandbox_checked: dict[str, str] = {}


def sandbox_problem(python: str = sys.executable) -> str:
    """'' when tasks can run in their own namespaces here, else why not (checked once)."""
    if python not in _sandbox_checked:
        import tempfile

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


def job_policy(job_doc: dict) -> dict:
    spec = job_doc["spec"]
    fail_codes: set[int] = set()
    for rule in (spec.get("podFailurePolicy") or {}).get("rules", []):
        codes = rule.get("onExitCodes")
        if rule.get("action") == "FailJob" and codes and codes.get("operator") == "In":
            fail_codes.update(codes["values"])
    return {
        "backoff": int(spec.get("backoffLimitPerIndex", 6)),
        "fail_codes": fail_codes,
        "deadline": spec.get("activeDeadlineSeconds"),
    }


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
    """One pod index: its process, restarts and what it reported."""

    pod: Pod
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen | None = None
    state: str = "pending"  # pending | running | backoff | succeeded | failed
    restart_at: float = 0.0
    empty_dirs: list[Path] = field(default_factory=list)
    failures: int = 0
    exit_codes: list[int] = field(default_factory=list)
    started: float = 0.0
    first_start: float = 0.0
    ended: float = 0.0
    reported: TaskProgress = field(default_factory=TaskProgress)
    mounts: list[Mount] = field(default_factory=list)  # isolated runs: what the sandbox binds

    @property
    def name(self) -> str:
        return self.pod.name

    @property
    def progress(self) -> dict:
        return self.reported.progress

    @property
    def result(self) -> dict:
        return self.reported.result

    @property
    def events(self) -> list[dict]:
        return self.reported.events


@dataclass
class LocalJob:
    name: str
    role: str
    policy: dict
    tasks: list[Task]
    condition: str = ""  # "" | Complete | Failed
    reason: str = ""


class LocalCluster:
    def __init__(
        self,
        docs: list[dict],
        pods: list[Pod],
        workdir: Path,
        *,
        python: str = sys.executable,
        allow_images: tuple[str, ...] = (),
        ignore_gpus: bool = False,
        poll_seconds: float = 1.0,
        restart_delay: float = 10.0,
        on_line=None,
        isolate: bool | None = None,
    ):
        """isolate: True = each task in its pod's namespaces (an error if this machine cannot),
        False = plain processes with rewritten paths, None = isolate when possible."""
        self.workdir = workdir
        self.python = python
        self.restart_delay = restart_delay  # the Job controller's: 10s, 20s, 40s ... (cap 6 min)
        self.on_line = on_line or (lambda task, line: None)
        self.leader_file = workdir / "api" / "leader-status"  # what the launchers would ask the API server
        self.lock = threading.Lock()
        self._check_runnable(pods, allow_images, ignore_gpus)
        self.isolation_problem = sandbox_problem(python) if isolate is not False else "turned off"
        self.no_event_files = ""  # why TensorBoard event files are not read (the `progress` extra missing)
        if isolate and self.isolation_problem:
            raise UsageError(
                f"run-local cannot give each task its own namespaces here ({self.isolation_problem}). "
                "Run as root, allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; "
                "on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0), or pass --no-isolation."
            )
        self.isolated = not self.isolation_problem
        self.address_map = self._map_addresses(pods)
        self._empty_dirs: dict[str, list[Path]] = {}
        self.jobs: list[LocalJob] = []
        for doc in docs:
            if doc.get("kind") != "Job":
                continue
            job_pods = [p for p in pods if p.job == doc["metadata"]["name"]]
            tasks = [self._task(p, poll_seconds) for p in job_pods]
            self.jobs.append(
                LocalJob(doc["metadata"]["name"], job_pods[0].role if job_pods else "?", job_policy(doc), tasks)
            )
        leader_names = {t.env.get("TF_CLUSTER_LEADER_JOB") for j in self.jobs for t in j.tasks}
        self.leader = next((j for j in self.jobs if j.name in leader_names), None)
        self.started = 0.0

    # ------------------------------------------------------------ set-up

    @staticmethod
    def _check_runnable(pods, allow_images, ignore_gpus):
        for p in pods:
            image = p.container.get("image", "")
            repo = image.rsplit(":", 1)[0]
            if not repo.endswith(TRAINER_IMAGE) and repo not in allow_images:
                raise UsageError(
                    f"roles.{p.role} uses image {image!r}: run-local stands in only for the "
                    f"tf-cluster trainer image (its code is images/trainers in this checkout). "
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

    @staticmethod
    def _map_addresses(pods) -> dict[str, str]:
        addresses = []
        for p in pods:
            cfg = p.tf_config or {}
            for role_addrs in (cfg.get("cluster") or {}).values():
                for a in role_addrs:
                    if a not in addresses:
                        addresses.append(a)
        return {a: f"localhost:{port}" for a, port in zip(addresses, free_ports(len(addresses)), strict=False)}

    def _mounts(self, pod: Pod) -> list[Mount]:
        """The pod's mounts, each with the local folder that stands in for its volume."""
        pod_dir = self.workdir / "pods" / pod.name
        volumes = {v["name"]: v for v in pod.pod_spec.get("volumes", [])}
        out = [Mount(k, str(v), readonly=True) for k, v in IMAGE_PATHS.items()]
        for m in pod.container.get("volumeMounts", []):
            vol = volumes.get(m["name"], {})
            readonly, private = bool(m.get("readOnly")), False
            if m["mountPath"] == LAUNCHER_MOUNT:
                local, readonly = CHART / "files", True
            elif "persistentVolumeClaim" in vol:
                local = self.workdir / "volumes" / vol["persistentVolumeClaim"]["claimName"]
            elif "configMap" in vol:
                local, readonly = self.workdir / "configmaps" / vol["configMap"]["name"], True
            else:  # emptyDir: private to the pod, fresh for a replacement pod
                local, private = pod_dir / m["name"], True
            out.append(Mount(m["mountPath"], str(local), readonly, private, m["name"]))
        if self.isolated:
            if not any(m.target == IMAGE_WORKDIR for m in out):  # the container's own /tmp
                out.append(Mount(IMAGE_WORKDIR, str(pod_dir / "tmp"), private=True))
            out.append(Mount(POD_API, str(self.leader_file.parent), readonly=True))
            venv = Path(self.python).parent.parent
            if (venv / "pyvenv.cfg").exists():  # this machine's environment where the image has its own
                out.append(Mount(POD_VENV, str(venv), readonly=True))
            if (venv / requirements.BASE_FILE).exists():  # a --requirements layer: and what it extends
                out.append(Mount(requirements.BASE_MOUNT, (venv / requirements.BASE_FILE).read_text(), readonly=True))
        for m in out:
            Path(m.source).mkdir(parents=True, exist_ok=True)
            if m.private:
                self._empty_dirs.setdefault(pod.name, []).append(Path(m.source))
        return out

    def _localize(self, text: str, paths: list[tuple[str, str]]) -> str:
        """Map cluster addresses and container paths to local ones in ONE pass (a mapped
        path must never be mapped again, e.g. by a /tmp mount when the run dir is in /tmp)."""
        table = dict(self.address_map)
        table.update(paths)
        if not table:  # a single-task release, isolated: nothing to map
            return text
        keys = sorted(table, key=len, reverse=True)
        pattern = re.compile(
            "|".join(
                re.escape(k) if k in self.address_map else rf"(?<![\w/]){re.escape(k)}(?=/|$|[\s,:\"'])" for k in keys
            )
        )
        return pattern.sub(lambda m: table[m.group(0)], text)

    def _task(self, pod: Pod, poll_seconds: float) -> Task:
        mounts = self._mounts(pod)
        paths = [] if self.isolated else [(m.target, m.source) for m in mounts]
        paths.sort(key=lambda kv: -len(kv[0]))
        argv = [self._localize(a, paths) for a in pod.argv]
        in_venv = any(m.target == POD_VENV for m in mounts)
        python = f"{POD_VENV}/bin/{Path(self.python).name}" if in_venv else self.python
        argv = [python if a in ("python3", "python") else a for a in argv]
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
            env[progress.HYPERTUNE_ENV] = str(self.hypertune_file(pod.name))
        env.update({k: self._localize(v, paths) for k, v in pod.env.items()})
        env["TF_CLUSTER_LEADER_STATUS_FILE"] = (
            f"{POD_API}/{self.leader_file.name}" if self.isolated else str(self.leader_file)
        )
        env["TF_CLUSTER_POLL_SECONDS"] = str(poll_seconds)
        env["TF_CLUSTER_FENCE_SECONDS"] = "0"  # one machine, no API: no node to lose, nothing to fence
        log_path = self.workdir / "logs" / f"{pod.name}.log"
        if self.isolated:
            spec_path = self.workdir / "pods" / pod.name / "pod.json"
            root = self.workdir / "pods" / pod.name / "root"
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
            spec_path.write_text(json.dumps(spec, indent=1))
            argv = [self.python, str(SANDBOX), str(spec_path)]
        return Task(
            pod=pod,
            argv=argv,
            env=env,
            log_path=log_path,
            empty_dirs=self._empty_dirs.get(pod.name, []),
            mounts=mounts if self.isolated else [],
        )

    def host_path(self, task: Task, path: str) -> str:
        """Where a path the task saw (e.g. /mnt/shared/model) is on this machine."""
        for m in sorted(task.mounts, key=lambda m: -len(m.target)):
            t = m.target
            if path == t or path.startswith(t.rstrip("/") + "/"):
                return m.source + path[len(t) :]
        return path

    def write_configmaps(self, docs: list[dict]) -> None:
        for doc in docs:
            if doc.get("kind") == "ConfigMap":
                target = self.workdir / "configmaps" / doc["metadata"]["name"]
                target.mkdir(parents=True, exist_ok=True)
                for key, value in (doc.get("data") or {}).items():
                    (target / key).write_text(value)

    # ------------------------------------------------------------ running

    def _start(self, task: Task) -> None:
        task.log_path.parent.mkdir(parents=True, exist_ok=True)
        if task.failures:  # a replacement pod starts with empty emptyDirs, as in Kubernetes
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
        task.state = "running"
        task.started = time.monotonic()
        task.first_start = task.first_start or task.started
        threading.Thread(target=self._pump, args=(task, task.proc), daemon=True).start()

    def _pump(self, task: Task, proc: subprocess.Popen) -> None:
        with open(task.log_path, "a") as log:
            assert proc.stdout is not None  # stdout=PIPE
            for line in proc.stdout:
                line = line.rstrip("\n")
                log.write(line + "\n")
                task.reported.feed(line)
                self.on_line(task, line)

    def start(self) -> None:
        self.leader_file.parent.mkdir(parents=True, exist_ok=True)
        self.leader_file.write_text("")
        self.started = time.monotonic()
        for job in self.jobs:
            for task in job.tasks:
                self._start(task)

    def kill(self, role: str, index: int, sig: int = signal.SIGKILL) -> None:
        """Kill a pod's whole process tree, as a node would on pod deletion."""
        for job in self.jobs:
            for task in job.tasks:
                if task.pod.role == role and task.pod.index == index and task.proc:
                    try:
                        os.killpg(task.proc.pid, sig)
                    except ProcessLookupError:
                        pass

    def _stop_job(self, job: LocalJob) -> None:
        for task in job.tasks:
            if task.state == "backoff":
                task.state = "failed"
            if task.state == "running" and task.proc and task.proc.poll() is None:
                os.killpg(task.proc.pid, signal.SIGTERM)
                try:
                    task.proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(task.proc.pid, signal.SIGKILL)
                    task.proc.wait()
                task.state = "failed"
                task.ended = time.monotonic()

    def step(self) -> None:
        """Advance every Job by the Kubernetes rules; call it repeatedly."""
        with self.lock:
            for job in self.jobs:
                if job.condition:
                    continue
                for task in job.tasks:
                    if task.state != "running" or task.proc is None or task.proc.poll() is None:
                        continue
                    rc = task.proc.returncode
                    rc = 128 - rc if rc < 0 else rc
                    task.exit_codes.append(rc)
                    task.ended = time.monotonic()
                    if rc == 0:
                        task.state = "succeeded"
                    elif rc in job.policy["fail_codes"]:
                        task.state = "failed"
                        job.condition, job.reason = (
                            "Failed",
                            (f"{task.name} exited {rc}, a non-retryable exit code (podFailurePolicy FailJob)"),
                        )
                    else:
                        task.failures += 1
                        if task.failures > job.policy["backoff"]:
                            task.state = "failed"
                        else:  # podReplacementPolicy: Failed -> replace after exit, with backoff
                            task.state = "backoff"
                            task.restart_at = time.monotonic() + min(self.restart_delay * 2 ** (task.failures - 1), 360)
                for task in job.tasks:
                    if task.state == "backoff" and time.monotonic() >= task.restart_at and not job.condition:
                        self._start(task)
                if job.condition == "Failed":
                    self._stop_job(job)
                elif all(t.state == "succeeded" for t in job.tasks):
                    job.condition = "Complete"
                elif all(t.state in ("succeeded", "failed") for t in job.tasks):
                    failed = [t.name for t in job.tasks if t.state == "failed"]
                    job.condition, job.reason = (
                        "Failed",
                        (
                            f"index(es) {', '.join(failed)} failed more than backoffLimitPerIndex="
                            f"{job.policy['backoff']} times"
                        ),
                    )
                deadline = job.policy["deadline"]
                if not job.condition and deadline and time.monotonic() - self.started > deadline:
                    job.condition, job.reason = "Failed", f"activeDeadlineSeconds={deadline} exceeded"
                    self._stop_job(job)
            if self.leader and self.leader.condition:
                self.leader_file.write_text(self.leader.condition)

    @property
    def finished(self) -> bool:
        return all(j.condition for j in self.jobs)

    def time_out(self, timeout: float) -> None:
        """Fail and stop every unfinished Job, as run-local's --timeout does."""
        self.fail_unfinished(f"run-local --timeout {timeout:.0f}s reached")

    def fail_unfinished(self, reason: str) -> None:
        """Fail and stop every unfinished Job with this reason (a timeout, a tuner pruning the run)."""
        with self.lock:
            for job in self.jobs:
                if not job.condition:
                    job.condition, job.reason = "Failed", reason
                    self._stop_job(job)

    def shutdown(self) -> None:
        for job in self.jobs:
            self._stop_job(job)

    def tasks(self) -> list[Task]:
        return [t for j in self.jobs for t in j.tasks]

    # ------------------------------------------------------------ what the tasks left

    def read_files(self, only_silent: bool = False) -> None:
        """Fill each task's `reported.files` from files it wrote: a cloudml-hypertune metrics
        file in its own /tmp (isolated runs), and for the task that writes summaries (the first
        of the leading Job) TensorBoard event files under its LOG_DIR. `only_silent`: skip tasks
        whose output already shows progress."""
        summary_task = self.leader.tasks[0] if self.leader and self.leader.tasks else None
        for t in self.tasks():
            if only_silent and t.reported.progress:
                continue
            found: dict[str, float] = {}
            log_dir = t.env.get("LOG_DIR")
            if t is summary_task and log_dir and not self.no_event_files:
                try:
                    found.update(progress.event_scalars(Path(self.host_path(t, log_dir))))
                except ToolMissing as e:  # the run goes on; only the summaries' progress is not read
                    self.no_event_files = str(e)
                    print(f"run-local: {e}", file=sys.stderr, flush=True)
            if t.mounts:  # isolated: its /tmp is its own
                metrics = Path(self.host_path(t, t.env.get(progress.HYPERTUNE_ENV) or progress.HYPERTUNE_FILE))
            else:
                metrics = Path(t.env.get(progress.HYPERTUNE_ENV) or self.hypertune_file(t.name))
            if metrics.is_file():
                text = metrics.read_text(errors="replace")
                found.update(progress.hypertune_metrics(text))
                t.reported.add_reports(progress.hypertune_series(text))
            if found:
                t.reported.files = {**t.reported.files, **found}  # one assignment: readers in other threads

    def hypertune_file(self, task: str) -> Path:
        """Where a task that is not isolated writes its cloudml-hypertune metrics (CLOUD_ML_HP_METRIC_FILE)."""
        return self.workdir / "pods" / task / "hypertune" / "output.metrics"

    def private_files(self) -> dict[str, list[str]]:
        """Per task, what it left in folders private to its pod (/tmp, emptyDirs), as the pod
        saw them: ["/tmp/ckpt (12 files)", ...]. Lost with the pod on Kubernetes."""
        out: dict[str, list[str]] = {}
        for t in self.tasks():
            entries = []
            for m in t.mounts:
                src = Path(m.source)
                if not m.private or not src.is_dir():
                    continue
                for child in sorted(src.iterdir()):
                    if child.name in HOUSEKEEPING:
                        continue
                    n = sum(1 for f in child.rglob("*") if f.is_file()) if child.is_dir() else 1
                    entries.append(f"{m.target.rstrip('/')}/{child.name} ({n} file{'s' if n != 1 else ''})")
            if entries:
                out[t.name] = entries
        return out

    def shared_path_hints(self) -> list[str]:
        """For each path a failed task could not find under a folder private to its pod:
        which tasks have it, and where the file belongs instead. One hint per path."""
        shared = sorted({m.target for t in self.tasks() for m in t.mounts if not m.private and not m.readonly})
        seen: set[str] = set()
        hints = []
        for t in self.tasks():
            if not any(t.exit_codes) or not t.log_path.exists():
                continue
            for path in missing_paths(t.log_path.read_text(errors="replace")):
                private = next((m for m in t.mounts if m.private and _under(path, m.target)), None)
                if not private or path in seen:
                    continue
                seen.add(path)
                holders = [
                    o.name
                    for o in self.tasks()
                    if o is not t and self.host_path(o, path) != path and _near(Path(self.host_path(o, path)))
                ]
                if private.volume in STORAGE_VOLUMES:
                    fix = (
                        f"storage.{private.volume}.type is emptyDir, one copy per pod: set it to pvc "
                        f"(or existingClaim) so every task shares {private.target}"
                    )
                elif shared:
                    fix = f"write it under a shared volume ({', '.join(shared)} here)"
                else:
                    fix = (
                        "Give the release shared storage (storage.checkpoints.type=pvc, mounted at "
                        "/mnt/checkpoints) and write it under CHECKPOINT_DIR or MODEL_DIR"
                    )
                hints.append(
                    f"{t.name} could not find {path}"
                    + (f" (it is in {', '.join(holders)}'s own {private.target})" if holders else "")
                    + f": {private.target} is private to each pod, here as on Kubernetes. {fix}."
                )
                break
        return hints


MISSING = re.compile(r"NotFound|No such file or directory|not found|does not exist|Failed to find", re.I)
ABS_PATH = re.compile(r"(?<![\w.:/])(/[\w.@+=-]+(?:/[\w.@+=-]+)*)")


def missing_paths(log: str) -> list[str]:
    """Absolute paths on log lines that say something was not found, first seen first."""
    return list(dict.fromkeys(p for line in log.splitlines() if MISSING.search(line) for p in ABS_PATH.findall(line)))


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _near(host_path: Path) -> bool:
    """The path, or the folder it would be in, exists (a sharded write leaves its folder)."""
    return host_path.exists() or (host_path.parent.exists() and any(host_path.parent.iterdir()))


def clean_workdir(workdir: Path) -> None:
    if workdir.exists():
        shutil.rmtree(workdir)
