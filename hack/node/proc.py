"""Running things: commands, the node's long-lived processes (pid files, logs), waits, API calls."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import ssl
import string
import subprocess
import time
import urllib.request
from pathlib import Path

from .config import API_PORT, HERE, KUBECONFIG, ROOT, SOCK, STATE, logs, pki, run

_t0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[node {time.monotonic() - _t0:6.1f}s] {msg}", flush=True)


class NodeError(RuntimeError):
    pass


def sh(*argv, check=True, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise NodeError(
            f"{' '.join(map(str, argv))} failed (exit {p.returncode}): {(p.stderr or p.stdout).strip()[-1500:]}"
        )
    return p


def node_ip() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: picks the interface of the default route
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def exited(pid: int) -> bool:
    """Has `pid` exited? A zombie has: the harness' processes outlive the `up` that started them, so
    their parent is PID 1, and this machine's PID 1 reaps orphans a second or two late."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def pid_of(name: str, pid_dir: Path | None = None) -> int | None:
    """The pid of the harness's running process `name` (its pid file in `pid_dir`, default `run`)."""
    f = (pid_dir or run) / f"{name}.pid"
    try:
        pid = int(f.read_text())
        if exited(pid):
            return None
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if not cmdline:  # a process inside execve (seen under load: nsenter -> containerd)
            return pid
        base = name.split("@")[0]  # `kubelet@tf-cluster-node-2`: a kubelet (config.Node.proc)
        return pid if base.encode() in cmdline or b"coredns" in cmdline else None
    except (OSError, ValueError):
        return None


# The Go runtime's collector in the harness's own processes (TF_CLUSTER_NODE_GOGC, Go's GOGC):
# unset, Go's default.
GO_ENV = {"GOGC": os.environ["TF_CLUSTER_NODE_GOGC"]} if os.environ.get("TF_CLUSTER_NODE_GOGC") else {}


def start(name: str, argv: list, env: dict | None = None, netns: str | None = None, mntns: Path | None = None) -> None:
    """Start a long-lived process `name` (pid file, log), in network namespace `netns` and mount
    namespace `mntns` (a file it is bound to: config.Node.mntns) if given."""
    if pid_of(name):
        say(f"{name} already running (pid {pid_of(name)})")
        return
    logs.mkdir(parents=True, exist_ok=True)
    run.mkdir(parents=True, exist_ok=True)
    log = open(logs / f"{name}.log", "a")
    log.write(f"\n=== {time.strftime('%F %T')} {' '.join(map(str, argv))}\n")
    log.flush()
    p = subprocess.Popen(
        [str(a) for a in in_namespaces(netns, mntns) + argv],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **GO_ENV, **(env or {})},
        cwd=STATE,
    )
    (run / f"{name}.pid").write_text(str(p.pid))
    for _ in range(100):  # until the fork has exec'd (before that its cmdline is ours)
        if p.poll() is not None or pid_of(name):
            break
        time.sleep(0.02)
    say(f"{name} started (pid {p.pid}, log {logs / (name + '.log')})")


def mount_table(mountinfo: str | None = None) -> list[tuple[str, str]]:
    """(mount point, filesystem type) of each line of a /proc/<pid>/mountinfo text (this process's
    when None), in the kernel's order: a mount over another comes after it. Octal escapes in a
    point (\\040 for a space) are decoded."""
    text = Path("/proc/self/mountinfo").read_text() if mountinfo is None else mountinfo
    table = []
    for line in text.splitlines():
        before, _, after = line.partition(" - ")
        fields = before.split()
        if len(fields) > 4 and after:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            table.append((point, after.split()[0]))
    return table


def in_namespaces(netns: str | None, mntns: Path | None) -> list[str]:
    """nsenter's arguments for a command in these namespaces ([] for none)."""
    flags = ([f"--net=/run/netns/{netns}"] if netns else []) + ([f"--mount={mntns}"] if mntns else [])
    return ["nsenter", *flags, "--"] if flags else []


def stop(name: str, timeout: float = 20) -> None:
    pid = pid_of(name)
    if not pid:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if exited(pid):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    (run / f"{name}.pid").unlink(missing_ok=True)
    say(f"{name} stopped")


def log_tail(name: str, n: int = 25) -> str:
    try:
        return "\n    ".join((logs / f"{name}.log").read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def wait_for(what: str, check, timeout: float, component: str | None = None, every: float = 0.5):
    deadline, last = time.monotonic() + timeout, 0.0
    while True:
        try:
            result = check()
            if result:
                return result
        except Exception:  # noqa: BLE001 - not ready yet
            pass
        if component and not pid_of(component):
            raise NodeError(f"{component} exited while waiting for {what}; last log lines:\n    {log_tail(component)}")
        if time.monotonic() > deadline:
            raise NodeError(
                f"timed out after {timeout:.0f}s waiting for {what}"
                + (f"; last log lines of {component}:\n    {log_tail(component)}" if component else "")
            )
        if time.monotonic() - last > 10:
            say(f"waiting for {what} ...")
            last = time.monotonic()
        time.sleep(every)


def api_get(path: str):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    with urllib.request.urlopen(f"https://127.0.0.1:{API_PORT}{path}", context=ctx, timeout=5) as r:
        return json.loads(r.read()) if r.headers.get_content_type() == "application/json" else r.read().decode()


def kubectl(*args, input: str | None = None, check=True):
    exe = shutil.which("kubectl", path=f"{ROOT / '.tools' / 'bin'}:{os.environ.get('PATH', '')}")
    if not exe:
        raise NodeError("kubectl not found: run `make setup` first")
    return sh(exe, "--kubeconfig", KUBECONFIG, *args, input=input, check=check)


def ctr(*args, check=True, sock: Path = SOCK):
    """containerd's CLI on a node's containerd (default: this host's)."""
    return sh("ctr", "--address", sock, "--namespace", "k8s.io", *args, check=check)


def template(name: str, **values) -> str:
    """A config file of node/files with its ${...} placeholders filled (string.Template)."""
    return string.Template((HERE / "files" / name).read_text()).substitute({k: str(v) for k, v in values.items()})
