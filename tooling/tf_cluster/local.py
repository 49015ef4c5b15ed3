"""Run the pods a rendered release would create as local processes.

Each pod of each Indexed Job becomes one process (the chart's launcher around
the role's command), with the pod's env (index substituted), its cluster
addresses mapped to free localhost ports (a TF server listens on all interfaces
on its port, so distinct ports stand in for distinct pods) and its volume mounts
mapped to folders under the run directory. Job semantics follow Kubernetes:
an index that fails is restarted until it exceeds `backoffLimitPerIndex`; an
exit code listed in a `FailJob` rule of the `podFailurePolicy` fails the Job at
once; a Job is Complete when every index succeeded. The leading Job's condition
is written to a file the launchers of stopping roles poll, as they would poll
the API server in a cluster.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import CHART, ROOT
from .errors import UsageError
from .manifests import Pod
from .progress import TaskProgress

TRAINER_IMAGE = "tf-cluster-trainer"
IMAGE_PATHS = {  # what the trainer image holds -> where this checkout has it
    "/opt/tf-cluster/trainers": ROOT / "images" / "trainers",
}
LAUNCHER_MOUNT = "/opt/tf-cluster/launcher"


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
    ):
        self.workdir = workdir
        self.python = python
        self.restart_delay = restart_delay  # the Job controller's: 10s, 20s, 40s ... (cap 6 min)
        self.on_line = on_line or (lambda task, line: None)
        self.leader_file = workdir / "leader-status"
        self.lock = threading.Lock()
        self._check_runnable(pods, allow_images, ignore_gpus)
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

    def _path_map(self, pod: Pod) -> list[tuple[str, str]]:
        pod_dir = self.workdir / "pods" / pod.name
        volumes = {v["name"]: v for v in pod.pod_spec.get("volumes", [])}
        mapping = [(k, str(v)) for k, v in IMAGE_PATHS.items()]
        for m in pod.container.get("volumeMounts", []):
            vol = volumes.get(m["name"], {})
            if m["mountPath"] == LAUNCHER_MOUNT:
                local = CHART / "files"
            elif "persistentVolumeClaim" in vol:
                local = self.workdir / "volumes" / vol["persistentVolumeClaim"]["claimName"]
            elif "configMap" in vol:
                local = self.workdir / "configmaps" / vol["configMap"]["name"]
            else:  # emptyDir: private to the pod, fresh for a replacement pod
                local = pod_dir / m["name"]
                self._empty_dirs.setdefault(pod.name, []).append(local)
            local.mkdir(parents=True, exist_ok=True)
            mapping.append((m["mountPath"], str(local)))
        return sorted(mapping, key=lambda kv: -len(kv[0]))

    def _localize(self, text: str, paths: list[tuple[str, str]]) -> str:
        """Map cluster addresses and container paths to local ones in ONE pass (a mapped
        path must never be mapped again, e.g. by a /tmp mount when the run dir is in /tmp)."""
        table = dict(self.address_map)
        table.update(paths)
        keys = sorted(table, key=len, reverse=True)
        pattern = re.compile(
            "|".join(
                re.escape(k) if k in self.address_map else rf"(?<![\w/]){re.escape(k)}(?=/|$|[\s,:\"'])" for k in keys
            )
        )
        return pattern.sub(lambda m: table[m.group(0)], text)

    def _task(self, pod: Pod, poll_seconds: float) -> Task:
        paths = self._path_map(pod)
        argv = [self._localize(a, paths) for a in pod.argv]
        argv = [self.python if a in ("python3", "python") else a for a in argv]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "TF_CONFIG"))}
        env.update({k: self._localize(v, paths) for k, v in pod.env.items()})
        env["TF_CLUSTER_LEADER_STATUS_FILE"] = str(self.leader_file)
        env["TF_CLUSTER_POLL_SECONDS"] = str(poll_seconds)
        env["PATH"] = f"{Path(self.python).parent}{os.pathsep}{env.get('PATH', '')}"
        env["TMPDIR"] = env.get("HOME", str(self.workdir))
        log_path = self.workdir / "logs" / f"{pod.name}.log"
        return Task(pod=pod, argv=argv, env=env, log_path=log_path, empty_dirs=self._empty_dirs.get(pod.name, []))

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
        self.workdir.mkdir(parents=True, exist_ok=True)
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
        with self.lock:
            for job in self.jobs:
                if not job.condition:
                    job.condition, job.reason = "Failed", f"run-local --timeout {timeout:.0f}s reached"
                    self._stop_job(job)

    def shutdown(self) -> None:
        for job in self.jobs:
            self._stop_job(job)

    def tasks(self) -> list[Task]:
        return [t for j in self.jobs for t in j.tasks]


def clean_workdir(workdir: Path) -> None:
    if workdir.exists():
        shutil.rmtree(workdir)
