"""Run one local task as its pod would see the machine: `python sandbox.py SPEC.json`.

run-local starts every task through this file (run as a script, so it imports nothing of
tf_cluster and starts in milliseconds). Linux namespaces give the task what a pod has:

- its own mount namespace, whose root is a tmpfs holding read-only binds of this machine's
  top-level folders (the pod's read-only root filesystem), with the pod's volumes bound at
  their real `mountPath`s: `/tmp` and other emptyDirs private to the task, claims shared by
  the tasks that mount them, the launcher and code ConfigMaps read-only;
- its own PID namespace (the launcher is PID 1, as in a container), UTS namespace (the
  pod's hostname) and IPC namespace; a private /proc and /dev/shm;
- its working directory (the image's WORKDIR) and only its environment.

The network namespace is the machine's: tasks reach each other at the localhost ports
run-local maps the cluster's addresses to. Not a security boundary (the host's folders are
readable); a faithfulness one: a program that writes to a path its pod would not share with
another task fails here as it would on Kubernetes.

As root this needs nothing else; as another user it adds a user namespace (the task runs as
uid 0 inside, mapped to the caller). `python sandbox.py --probe DIR` exits 0 when both work.

The process tree: this process (in the machine's PID namespace, the one run-local waits for
and signals) forks the task's PID 1 and forwards SIGTERM/SIGINT/SIGHUP to it; if this process
is killed, PR_SET_PDEATHSIG kills PID 1 and with it the whole namespace.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
from collections.abc import Iterable
from typing import Any

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID = 0x10000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
MNT_DETACH, PR_SET_PDEATHSIG = 2, 1
# statvfs f_flag bits (ST_*) a read-only remount must keep: the kernel refuses to drop locked ones
KEEP_FLAGS = {
    os.ST_RDONLY: MS_RDONLY,
    os.ST_NOSUID: MS_NOSUID,
    os.ST_NODEV: MS_NODEV,
    os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME,
    os.ST_NODIRATIME: MS_NODIRATIME,
    os.ST_RELATIME: MS_RELATIME,
}
NOT_FROM_HOST = {"/proc", "/tmp"}  # always the task's own
WRITABLE_HOST = {"/dev", "/sys", "/run"}  # as in a pod: devices stay usable

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _enc(s: str | None) -> bytes | None:
    return s.encode() if s is not None else None


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    rc = libc.mount(_enc(source), _enc(target), _enc(fstype), flags, _enc(data))
    _check(rc, f"mount {source or fstype} on {target}")


def read_only(target: str) -> None:
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY
    f_flag = os.statvfs(target).f_flag
    for bit, ms in KEEP_FLAGS.items():
        if f_flag & bit:
            flags |= ms
    mount(None, target, None, flags)


def enter_namespaces() -> None:
    flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0:
        flags |= CLONE_NEWUSER
    _check(libc.unshare(flags), "unshare")
    if uid != 0:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def writable(path: str) -> bool:
    return any(path == w or path.startswith(w + "/") for w in WRITABLE_HOST)


def mount_ancestors(targets: Iterable[str]) -> set[str]:
    """Container folders with a mount point below: tmpfs folders, their children bound one by one."""
    ancestors: set[str] = set()
    for t in targets:
        p = os.path.dirname(t)
        while p not in ancestors:
            ancestors.add(p)
            if p == "/":
                break
            p = os.path.dirname(p)
    return ancestors


class HostView:
    """This machine's folders under the pod's root, bound around the pod's mount points (read-only
    with a read-only root, once `remount_read_only` ran)."""

    def __init__(self, root: str, targets: dict[str, dict[str, Any]], readonly_root: bool) -> None:
        self.root, self.targets, self.readonly_root = root, targets, readonly_root
        self.ancestors = mount_ancestors(targets)
        self.ro_binds: list[str] = []

    def populate(self, cdir: str) -> None:
        names = sorted(os.listdir(cdir)) if os.path.isdir(cdir) and not os.path.islink(cdir) else []
        for name in names:
            c = os.path.join(cdir, name)
            if c in self.targets or c in NOT_FROM_HOST:
                continue
            if c in self.ancestors and not os.path.islink(c):
                os.mkdir(self.root + c)
                self.populate(c)
            else:
                self.bind(c)
        for p in sorted(self.ancestors | set(self.targets)):  # mount points this machine does not have
            if os.path.dirname(p) == cdir and p != cdir and not os.path.lexists(self.root + p) and p in self.ancestors:
                os.mkdir(self.root + p)
                self.populate(p)

    def bind(self, c: str) -> None:
        """One host entry at its place under the root: a symlink copied, a folder or file bound."""
        dest = self.root + c
        if os.path.islink(c):
            os.symlink(os.readlink(c), dest)
            return
        if os.path.isdir(c):
            os.mkdir(dest)
            mount(c, dest, None, MS_BIND | MS_REC)
        else:  # files, devices, sockets
            open(dest, "w").close()
            mount(c, dest, None, MS_BIND)
        if self.readonly_root and not writable(c):
            self.ro_binds.append(dest)

    def remount_read_only(self) -> None:
        for path in self.ro_binds:
            read_only(path)


def bind_mounts(root: str, targets: dict[str, dict[str, Any]]) -> None:
    """The pod's volumes at their mount paths, outermost first."""
    for target in sorted(targets, key=lambda t: t.count("/")):
        m = targets[target]
        dest = root + target
        if not os.path.lexists(dest):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.isfile(m["source"]):
                open(dest, "w").close()
            else:
                os.mkdir(dest)
        mount(m["source"], dest, None, MS_BIND | MS_REC)
        if m.get("readonly"):
            read_only(dest)


def build_root(spec: dict[str, Any]) -> None:
    """The pod's filesystem view under spec['root'] (a tmpfs): host folders bound read-only,
    the pod's mounts bound at their paths, mount points made inside the tmpfs only."""
    root = spec["root"]
    targets = {m["target"]: m for m in spec["mounts"]}
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755")
    host = HostView(root, targets, spec.get("readonly_root", True))
    host.populate("/")
    # The run dir (with this root) lies in a bound host folder: drop that copy of the root.
    try:
        _check(libc.umount2((root + root).encode(), MNT_DETACH), "umount")
    except OSError:
        pass
    host.remount_read_only()
    bind_mounts(root, targets)
    os.makedirs(root + "/proc", exist_ok=True)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if os.path.isdir(root + "/dev/shm"):
        mount("tmpfs", root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    if spec.get("readonly_root", True):
        mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def pid1(spec: dict[str, Any]) -> None:
    """The child: the task's PID 1. Never returns."""
    try:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        os.setpgid(0, 0)  # signals to run-local's process group reach the parent, which forwards them once
        build_root(spec)
        socket.sethostname(spec["hostname"])
        os.chroot(spec["root"])
        os.chdir(spec.get("workdir") or "/")
        os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
    except Exception as e:  # noqa: BLE001 - reported to the task log, then a distinct exit code
        sys.stderr.write(f"[tf-cluster sandbox] could not start the task as its pod would run: {e}\n")
        sys.stderr.flush()
        os._exit(127)


def run(spec: dict[str, Any]) -> int:
    enter_namespaces()
    child = os.fork()
    if child == 0:
        pid1(spec)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda s, _f: os.kill(child, s))
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def probe(scratch: str) -> int:
    """Exit 0 when namespaces and mounts work here (a trivial task through the same code)."""
    os.makedirs(scratch + "/root", exist_ok=True)
    os.makedirs(scratch + "/tmp", exist_ok=True)
    spec = {
        "root": scratch + "/root",
        "hostname": "probe",
        "mounts": [{"target": "/tmp", "source": scratch + "/tmp"}],
        "workdir": "/tmp",
        "argv": ["/bin/sh", "-c", "touch /tmp/ok"],
        "env": {"PATH": "/usr/bin:/bin"},
    }
    rc = run(spec)
    return 0 if rc == 0 and os.path.exists(scratch + "/tmp/ok") else (rc or 1)


if __name__ == "__main__":
    if sys.argv[1] == "--probe":
        sys.exit(probe(sys.argv[2]))
    with open(sys.argv[1]) as f:
        sys.exit(run(json.load(f)))
