"""The verbs: up, status, down, env."""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import time

from . import __doc__ as DOC
from . import deferred, ledger, storage
from .addons import up_addons
from .argocd import ARGOCD_DIR, REGISTRY_DIR, up_argocd, up_registry
from .config import (
    API_PORT,
    BIN,
    BUILD_SH,
    CILIUM_DIR,
    COMPONENTS,
    K8S_VERSION,
    KUBECONFIG,
    NODE,
    POLICY_ENGINE,
    STATE,
    TRAINER_REPO,
    logs,
    run,
)
from .control_plane import up_control_plane
from .kubelet import node_ready, up_node
from .nodes import EXTRA_NODES, by_name, down_extra_nodes, isolate, kill, partition, pids, up_extra_nodes, up_runtimes
from .pki import ensure_pki, kubeconfig
from .policy import clean_up as clean_up_policy_engine
from .policy import up_policy_engine
from .ports import guard as guard_ports
from .ports import release as release_ports
from .proc import NodeError, ctr, kubectl, mount_table, node_ip, pid_of, say, sh, stop, wait_for
from .runtime import ctr_images, trainer_images
from .standin import ensure_index, ensure_jupyter_standin, ensure_standin, jupyter_image, serve_index, standin_image


def build(args, components: tuple[str, ...] = ()) -> int:
    """build.sh into the directories this package reads: the node's binaries, cached (all of
    them but the deferred ones, or `components`)."""
    say(f"building/checking binaries in {BIN} (cached after the first time)")
    paths = {"TF_CLUSTER_E2E_BIN": str(BIN), "ARGOCD_DIR": str(ARGOCD_DIR), "REGISTRY_DIR": str(REGISTRY_DIR)}
    paths.update(K8S_VERSION=K8S_VERSION, CILIUM_DIR=str(CILIUM_DIR))
    paths["TF_CLUSTER_NODE_POLICY"] = POLICY_ENGINE  # build.sh leaves Cilium out with "none"
    paths["TF_CLUSTER_NODE_DEFER"] = " ".join(deferred.components())  # build.sh leaves them out
    b = subprocess.run(["bash", BUILD_SH, *components], env={**os.environ, **paths})
    if b.returncode != 0:
        raise NodeError("building the node's binaries failed (see the lines above)")
    return 0


def node_images(args) -> tuple[list[str], list[str]]:
    """The first node's images (the trainer's, `--image`, and the stand-ins of the chart's default
    image and its notebook's) and the other nodes' (the chart's default image only: the scenarios
    that name the trainer or notebook image stay on the first node)."""
    images = args.image or trainer_images()
    if not images:
        raise NodeError(f"no trainer image in podman's store ({TRAINER_REPO}): run `make image` first")
    standin = ensure_standin()
    return [*images, standin, ensure_jupyter_standin()], [standin]


def up(args) -> int:
    t0 = time.monotonic()
    if os.geteuid() != 0:
        raise NodeError("the node needs root (kubelet, containerd, iptables): run as root")
    build(args)
    images, extra_images = node_images(args)
    for d in (STATE, run, logs):
        d.mkdir(parents=True, exist_ok=True)
    guard_ports()
    ip = node_ip()
    ensure_pki(ip)
    kubeconfig("admin", f"https://127.0.0.1:{API_PORT}").replace(KUBECONFIG)
    up_control_plane(ip)
    up_runtimes(images, extra_images)
    up_node(ip, images)
    serve_index()
    if POLICY_ENGINE == "cilium":
        up_policy_engine()
    else:
        say(f"TF_CLUSTER_NODE_POLICY={POLICY_ENGINE}: no NetworkPolicy engine, policies are not enforced")
    storage.up_server()
    storage.mount()
    up_addons()
    up_extra_nodes(extra_images)
    up_registry()
    if "argocd" not in deferred.components():
        up_argocd()
    wait_for(
        "the default ServiceAccount",
        lambda: kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0,
        60,
    )
    say(f"up in {time.monotonic() - t0:.1f}s: export KUBECONFIG={KUBECONFIG}")
    deferred.start_later()
    return 0


def preload(args) -> int:
    """Every node's containerd with the images `up` imports, and nothing else: `make check` runs it
    while `make test` still runs, so that `up` finds the images there. The imports mostly write
    (gigabytes into three stores) while the builds beside them are CPU-bound: in a cold run they
    were 112 s of `up`'s 137 s, on the critical path. It needs containerd and the pause binary,
    which the node's build makes: --wait waits for them that long."""
    t0 = time.monotonic()
    if os.geteuid() != 0:
        raise NodeError("the node's containerd needs root: run as root")
    needs = {
        "containerd (Debian, the node's build installs it)": lambda: shutil.which("containerd"),
        f"the pause binary ({BIN / 'pause'}, the node's build makes it)": lambda: (BIN / "pause").exists(),
    }
    deadline, said = time.monotonic() + args.wait, 0.0
    while missing := [what for what, there in needs.items() if not there()]:
        if time.monotonic() > deadline:
            raise NodeError(f"still missing after {args.wait:.0f}s: {'; '.join(missing)} (run `hack/node build`)")
        if time.monotonic() - said >= 60:
            say(f"preload waits for {'; '.join(missing)}")
            said = time.monotonic()
        time.sleep(5)
    with open("/run/lock/tf-cluster-apt.lock", "a") as lock:  # build.sh's: no install half done
        fcntl.flock(lock, fcntl.LOCK_EX)
    images, extra_images = node_images(args)
    for d in (STATE, run, logs):
        d.mkdir(parents=True, exist_ok=True)
    up_runtimes(images, extra_images)
    say(f"images preloaded in {time.monotonic() - t0:.1f}s: `up` starts the rest (`down` stops these containerds)")
    return 0


def status(args) -> int:
    ok = True
    for name in COMPONENTS:
        if name == "cilium-agent" and POLICY_ENGINE != "cilium":
            continue
        pid = pid_of(name)
        ok &= bool(pid)
        print(f"  {name:26} {'running pid ' + str(pid) if pid else 'DOWN'}")
    if pid_of("kube-apiserver"):
        try:
            print(f"  node {NODE:21} {'Ready' if node_ready() else 'NotReady'}")
            ok &= node_ready()
        except Exception as e:  # noqa: BLE001
            print(f"  node {NODE:21} unknown ({e})")
            ok = False
    for node in EXTRA_NODES:
        procs = ("containerd", "kubelet", "kube-proxy") + (("cilium-agent",) if POLICY_ENGINE == "cilium" else ())
        down_ = [c for c in procs if not pid_of(node.proc(c))]
        try:
            ready = node_ready(node.name)
        except Exception:  # noqa: BLE001
            ready = False
        ok &= ready and not down_
        print(
            f"  node {node.name:21} {'Ready' if ready else 'NotReady'}{'; down: ' + ', '.join(down_) if down_ else ''}"
        )
    print(f"  kubeconfig                 {KUBECONFIG}")
    return 0 if ok else 1


def down(args) -> int:
    t0 = time.monotonic()
    ledger.record()  # what the node's processes and pods used, while they still run (make check's table)
    deferred.stop()
    down_extra_nodes(args.purge)
    for name in (
        "argocd-application-controller",
        "argocd-repo-server",
        "registry",
        "git_http",
        "redis",
        "package-index",
    ):
        stop(name)
    stop("local-path-provisioner")
    stop("coredns")
    stop("kube-proxy")
    stop("kubelet")
    if pid_of("containerd"):
        # every pod's containers and sandboxes: kill their tasks, then remove them
        for cid in ctr("containers", "list", "-q", check=False).stdout.split():
            ctr("tasks", "kill", "-s", "SIGKILL", cid, check=False)
        time.sleep(1)
        for cid in ctr("containers", "list", "-q", check=False).stdout.split():
            ctr("tasks", "delete", "-f", cid, check=False)
            ctr("containers", "delete", cid, check=False)
        if args.purge:
            for image in ctr_images():
                ctr("images", "rm", image, check=False)
    stop("containerd")
    storage.down()
    clean_up_policy_engine()
    for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
        stop(name)
    release_ports()
    # mounts left by the kubelet and containerd, deepest first
    mounts = [point for point, _ in mount_table() if point.startswith(str(STATE))]
    for m in sorted(mounts, key=len, reverse=True):
        sh("umount", "-l", m, check=False)
    for ns in sh("ip", "netns", "list", check=False).stdout.split("\n"):
        if ns.startswith("cni-"):
            sh("ip", "netns", "delete", ns.split()[0], check=False)
    sh("iptables-save", check=False)  # kube-proxy's chains are flushed by `kube-proxy --cleanup`
    if (BIN / "kube-proxy").exists():
        sh(BIN / "kube-proxy", "--cleanup", check=False)
    # the other nodes cleaned up their own state (down_extra_nodes); their image stores stay unless --purge
    keep = {"pki", "containerd", "nodes"} if not args.purge else {"pki"}
    for child in STATE.iterdir() if STATE.exists() else []:
        if child.name not in keep:
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
    if args.purge:
        shutil.rmtree(STATE / "containerd", ignore_errors=True)
    say(
        f"down in {time.monotonic() - t0:.1f}s"
        + (" (images purged)" if args.purge else " (images kept in containerd for the next up)")
    )
    return 0


RESTARTABLE = ("kube-apiserver", "kubelet")
LEADER_ELECTED = ("kube-controller-manager", "kube-scheduler")
LEASE_RENEW_DEADLINE_S = 10.0  # their --leader-elect-renew-deadline's default


def restart(args) -> int:
    """A fault a test injects: stop one component, keep it down for a while, start it again as
    `up` does (what already runs is kept). Pods and containerd are not touched."""
    if not pid_of(args.component):
        raise NodeError(f"{args.component} is not running: `up` the node first")
    ip, t0 = node_ip(), time.monotonic()
    stop(args.component)
    stopped = time.monotonic()
    if args.component == "kube-apiserver":
        # In every real control plane (kubeadm, kind, the managed ones) kube-controller-manager and
        # kube-scheduler run leader-elected: they exit once their lease goes unrenewed for its
        # renew deadline (10 s) and come back when the API answers, with fresh caches. The
        # harness runs them with --leader-elect=false (nothing here would restart them after a
        # slow renewal), so the outage stops them as their lease would. Left running, the node
        # lifecycle controller judged the kubelets' leases from its stale cache once the API was
        # back and evicted every pod on nodes that were Ready again.
        time.sleep(LEASE_RENEW_DEADLINE_S)
        for name in LEADER_ELECTED:
            stop(name)
        say(f"{', '.join(LEADER_ELECTED)} stopped {LEASE_RENEW_DEADLINE_S:.0f}s later, as their lost lease would")
    left = max(args.down - (time.monotonic() - stopped), 0)
    say(f"{args.component} down; starting it again in {left:.0f}s")
    time.sleep(left)
    if args.component == "kube-apiserver":
        up_control_plane(ip)  # starts what is stopped: the API server, then the two above
    else:
        up_node(ip, [*trainer_images(), standin_image(), jupyter_image()])
    say(f"{args.component} back after {time.monotonic() - t0:.1f}s")
    return 0


def node_fault(args) -> int:
    """A fault on one of the other nodes (node/nodes.py): kill, partition, isolate, heal, start."""
    node = by_name(args.node)
    if args.verb == "kill":
        kill(node)
    elif args.verb == "isolate":
        isolate(node, cut=True)
    elif args.verb in ("partition", "heal"):
        partition(node, cut=args.verb == "partition")
        if args.verb == "heal":
            isolate(node, cut=False)
    else:  # start: a rebooted machine (its containers died with it)
        if pids(node):
            kill(node)
        partition(node, cut=False)
        up_extra_nodes([standin_image()], only=node)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="node", description=DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True)
    u = sub.add_parser("up")
    u.add_argument(
        "--image",
        action="append",
        help="trainer image(s) to import (default: every tf-cluster-trainer CPU tag in podman's store)",
    )
    u.set_defaults(func=up)
    pl = sub.add_parser("preload", help="only every node's containerd with its images (`up` then finds them)")
    pl.add_argument("--image", action="append", help="as for up")
    pl.add_argument("--wait", type=float, default=0, metavar="SECONDS", help="wait for containerd and pause")
    pl.set_defaults(func=preload)
    sub.add_parser("build", help="build the node's binaries (cached; `up` does it too)").set_defaults(func=build)
    sub.add_parser(
        "standin",
        help="build the stand-in of TensorFlow's official image and the pods' package index (`up` does it too)",
    ).set_defaults(func=lambda a: print(ensure_standin(), ensure_jupyter_standin(), ensure_index()) or 0)
    sub.add_parser(
        "deferred", help="build what TF_CLUSTER_NODE_DEFER names and start Argo CD (`up` runs it after itself)"
    ).set_defaults(func=deferred.build_and_start)
    sub.add_parser("status").set_defaults(func=status)
    d = sub.add_parser("down")
    d.add_argument("--purge", action="store_true", help="also remove the images imported into containerd")
    d.set_defaults(func=down)
    r = sub.add_parser("restart", help="stop a component, wait, start it again (a fault for the e2e tests)")
    r.add_argument("component", choices=RESTARTABLE)
    r.add_argument("--down", type=float, default=0, metavar="SECONDS", help="how long it stays down (default 0)")
    r.set_defaults(func=restart)
    for verb, text in (
        ("kill", "SIGKILL every process of another node at once (a machine losing power)"),
        ("partition", "cut another node off from the others and the control plane (its pods keep running)"),
        ("isolate", "cut another node off from the control plane only (its pods still reach their peers)"),
        ("heal", "join a cut-off or isolated node back"),
        ("start", "start a killed node again (a rebooted machine)"),
    ):
        f = sub.add_parser(verb, help=text)
        f.add_argument("node", help="its name or number (2, 3, ...)")
        f.set_defaults(func=node_fault)
    sub.add_parser("env").set_defaults(func=lambda a: print(f"export KUBECONFIG={KUBECONFIG}") or 0)
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except NodeError as e:
        print(f"[node] error: {e}", file=sys.stderr)
        return 1
