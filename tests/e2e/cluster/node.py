#!/usr/bin/env python3
"""One real Kubernetes node on this machine, assembled from the package registries.

    node.py up       bring it up (idempotent: what already runs is kept)
    node.py status   what runs, node and DNS health
    node.py down     stop everything, remove pods and cluster state; keep the
                     built binaries and the images imported into containerd
    node.py down --purge   also forget the images (containerd's store)
    node.py env      print `export KUBECONFIG=...`

The parts, as Kubernetes' own node e2e runs them: etcd (Debian), kube-apiserver,
kube-controller-manager, kube-scheduler, kubelet and kube-proxy built from the
Kubernetes Go modules, containerd + runc + the CNI bridge plugin (Debian),
CoreDNS built from its Go module (a host process serving cluster.local on the
pod bridge's gateway, which is the kubelet's clusterDNS), and Rancher's
local-path-provisioner (the default StorageClass `standard`, as on kind).
Images: a pause image and the trainer/base images from podman, imported into
containerd. Binaries are built by build.sh into ~/.cache/tf-cluster (cached).

Must run as root (kubelet, containerd, iptables). cgroup v1 hosts are
supported: the kubelet runs with `failCgroupV1: false` and the cgroupfs driver.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
K8S_VERSION = os.environ.get("K8S_VERSION", "1.35.4")
BIN = Path(
    os.environ.get("TF_CLUSTER_E2E_BIN")
    or os.environ.get("TF_CLUSTER_K8S_BIN")
    or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tf-cluster" / f"k8s-{K8S_VERSION}"
)
STATE = Path(os.environ.get("TF_CLUSTER_NODE_DIR", "/var/lib/tf-cluster-node"))
NODE = "tf-cluster-node"
BRIDGE, POD_CIDR, GATEWAY = "tfc0", "10.244.0.0/24", "10.244.0.1"
SVC_CIDR, API_SVC_IP = "10.96.0.0/16", "10.96.0.1"
ETCD_PORT, ETCD_PEER, API_PORT = 32379, 32380, 6443
CNI_BIN = next(
    (d for d in ("/usr/lib/cni", "/usr/libexec/cni", "/opt/cni/bin") if Path(d, "bridge").exists()), "/usr/lib/cni"
)
PAUSE_IMAGE = "localhost/tf-cluster/pause:1"
BASE_IMAGE = os.environ.get("TF_CLUSTER_BASE_IMAGE", "localhost/tf-cluster-base:bookworm")
TRAINER_REPO = "localhost/tf-cluster-trainer"
COMPONENTS = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "containerd",
    "kubelet",
    "kube-proxy",
    "coredns",
    "local-path-provisioner",
]

pki, run, logs = STATE / "pki", STATE / "run", STATE / "logs"
KUBECONFIG = STATE / "kubeconfig"
SOCK = run / "containerd.sock"
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


# ---------------------------------------------------------------- certificates
def ensure_pki(ip: str) -> None:
    pki.mkdir(parents=True, exist_ok=True)
    if not (pki / "ca.crt").exists():
        sh(
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            pki / "ca.key",
            "-out",
            pki / "ca.crt",
            "-days",
            "3650",
            "-subj",
            "/CN=tf-cluster-node-ca",
        )
    if not (pki / "sa.key").exists():
        sh("openssl", "genrsa", "-out", pki / "sa.key", "2048")
        sh("openssl", "rsa", "-in", pki / "sa.key", "-pubout", "-out", pki / "sa.pub")
    sans = ",".join(
        [f"IP:{x}" for x in ("127.0.0.1", ip, API_SVC_IP)]
        + [
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
            f"DNS:{NODE}",
        ]
    )
    certs = {
        "apiserver": ("/CN=kube-apiserver", sans),
        "admin": ("/O=system:masters/CN=tf-cluster-admin", None),
        "apiserver-kubelet-client": ("/O=system:masters/CN=kube-apiserver-kubelet-client", None),
        "controller-manager": ("/CN=system:kube-controller-manager", None),
        "scheduler": ("/CN=system:kube-scheduler", None),
        "kubelet": (f"/O=system:nodes/CN=system:node:{NODE}", None),
        "kubelet-serving": (f"/CN={NODE}", f"IP:127.0.0.1,IP:{ip},DNS:{NODE}"),
        "kube-proxy": ("/CN=system:kube-proxy", None),
    }
    for name, (subj, san) in certs.items():
        crt = pki / f"{name}.crt"
        if crt.exists() and (
            san is None
            or sh("openssl", "x509", "-in", crt, "-noout", "-ext", "subjectAltName", check=False).stdout.count(ip) > 0
        ):
            continue
        sh(
            "openssl",
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            pki / f"{name}.key",
            "-out",
            pki / f"{name}.csr",
            "-subj",
            subj,
        )
        ext = pki / f"{name}.ext"
        ext.write_text((f"subjectAltName={san}\n" if san else "") + "extendedKeyUsage=serverAuth,clientAuth\n")
        sh(
            "openssl",
            "x509",
            "-req",
            "-in",
            pki / f"{name}.csr",
            "-CA",
            pki / "ca.crt",
            "-CAkey",
            pki / "ca.key",
            "-CAcreateserial",
            "-out",
            crt,
            "-days",
            "3650",
            "-extfile",
            ext,
        )


def kubeconfig(name: str, server: str) -> Path:
    path = STATE / f"{name}.kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "tf-cluster-node",
                "clusters": [
                    {
                        "name": "tf-cluster-node",
                        "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")},
                    }
                ],
                "users": [
                    {
                        "name": name,
                        "user": {
                            "client-certificate": str(pki / f"{name}.crt"),
                            "client-key": str(pki / f"{name}.key"),
                        },
                    }
                ],
                "contexts": [{"name": "tf-cluster-node", "context": {"cluster": "tf-cluster-node", "user": name}}],
            },
            indent=1,
        )
    )
    return path


# ---------------------------------------------------------------- processes
def pid_of(name: str) -> int | None:
    f = run / f"{name}.pid"
    try:
        pid = int(f.read_text())
        os.kill(pid, 0)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        return pid if name.encode() in cmdline or b"coredns" in cmdline else None
    except (OSError, ValueError):
        return None


def start(name: str, argv: list, env: dict | None = None) -> None:
    if pid_of(name):
        say(f"{name} already running (pid {pid_of(name)})")
        return
    logs.mkdir(parents=True, exist_ok=True)
    run.mkdir(parents=True, exist_ok=True)
    log = open(logs / f"{name}.log", "a")
    log.write(f"\n=== {time.strftime('%F %T')} {' '.join(map(str, argv))}\n")
    log.flush()
    p = subprocess.Popen(
        [str(a) for a in argv],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **(env or {})},
        cwd=STATE,
    )
    (run / f"{name}.pid").write_text(str(p.pid))
    for _ in range(100):  # until the fork has exec'd (before that its cmdline is ours)
        if p.poll() is not None or pid_of(name):
            break
        time.sleep(0.02)
    say(f"{name} started (pid {p.pid}, log {logs / (name + '.log')})")


def stop(name: str, timeout: float = 20) -> None:
    pid = pid_of(name)
    if not pid:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            break
        time.sleep(0.2)
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


def ctr(*args, check=True):
    return sh("ctr", "--address", SOCK, "--namespace", "k8s.io", *args, check=check)


# ---------------------------------------------------------------- the parts
def up_control_plane(ip: str) -> None:
    start(
        "etcd",
        [
            "etcd",
            "--name",
            NODE,
            "--data-dir",
            STATE / "etcd",
            "--listen-client-urls",
            f"http://127.0.0.1:{ETCD_PORT}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{ETCD_PORT}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{ETCD_PEER}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{ETCD_PEER}",
            "--initial-cluster",
            f"{NODE}=http://127.0.0.1:{ETCD_PEER}",
        ],
    )
    start(
        "kube-apiserver",
        [
            BIN / "kube-apiserver",
            f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
            f"--advertise-address={ip}",
            f"--secure-port={API_PORT}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SVC_CIDR}",
            "--allow-privileged=false",
        ],
    )
    wait_for("kube-apiserver /readyz", lambda: api_get("/readyz") == "ok", 120, "kube-apiserver")
    say("kube-apiserver ready")
    start(
        "kube-controller-manager",
        [
            BIN / "kube-controller-manager",
            f"--kubeconfig={kubeconfig('controller-manager', f'https://127.0.0.1:{API_PORT}')}",
            f"--authentication-kubeconfig={STATE / 'controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={STATE / 'controller-manager.kubeconfig'}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--service-cluster-ip-range={SVC_CIDR}",
            "--terminated-pod-gc-threshold=200",
        ],
    )
    start(
        "kube-scheduler",
        [
            BIN / "kube-scheduler",
            f"--kubeconfig={kubeconfig('scheduler', f'https://127.0.0.1:{API_PORT}')}",
            f"--authentication-kubeconfig={STATE / 'scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={STATE / 'scheduler.kubeconfig'}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
        ],
    )


def containerd_config() -> Path:
    path = STATE / "containerd.toml"
    path.write_text(f"""version = 2
root = "{STATE / "containerd" / "root"}"
state = "{run / "containerd"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{SOCK}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  enable_unprivileged_ports = true
  # some hosts (VMs, nested containers) refuse to lower oom_score_adj even to root; the kubelet asks
  # -998 for sandboxes: clamp to containerd's own value instead of failing every pod
  restrict_oom_score_adj = {str(restrict_oom()).lower()}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{STATE / "cni" / "net.d"}"
""")
    return path


def restrict_oom() -> bool:
    """Can this host lower a process's oom_score_adj? (runc sets -998 on every pod sandbox.)"""
    p = subprocess.run(["sh", "-c", "echo -998 > /proc/self/oom_score_adj"], capture_output=True)
    return p.returncode != 0


def ensure_network() -> None:
    for key in ("net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"):
        try:
            Path("/proc/sys", key).write_text("1")
        except OSError as e:
            say(f"warning: cannot set {key}: {e}")
    if sh("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
    if GATEWAY not in sh("ip", "-4", "addr", "show", BRIDGE).stdout:
        sh("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    netd = STATE / "cni" / "net.d"
    netd.mkdir(parents=True, exist_ok=True)
    (netd / "10-tf-cluster.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": "tf-cluster",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": BRIDGE,
                        "isGateway": True,
                        "ipMasq": True,
                        "hairpinMode": True,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": POD_CIDR, "gateway": GATEWAY}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                            "dataDir": str(STATE / "cni" / "ipam"),
                        },
                    },
                    {"type": "portmap", "capabilities": {"portMappings": True}},
                ],
            },
            indent=1,
        )
    )


def podman(*args, check=True):
    flags = (
        []
        if Path("/sys/fs/cgroup/cgroup.controllers").exists()
        else ["--runtime", "runc", "--cgroup-manager", "cgroupfs"]
    )
    return sh("podman", *flags, *args, check=check)


def ctr_images() -> set[str]:
    return set(ctr("images", "list", "-q").stdout.split())


def ensure_pause_image() -> None:
    if PAUSE_IMAGE in ctr_images():
        return
    say("building the pause image (a static Go binary, no base) with buildah")
    tar = STATE / "pause.tar"
    c = sh("buildah", "from", "scratch").stdout.strip()
    try:
        sh("buildah", "copy", c, BIN / "pause", "/pause")
        sh("buildah", "config", "--entrypoint", '["/pause"]', "--user", "65535:65535", c)
        sh("buildah", "commit", "-q", c, PAUSE_IMAGE)
    finally:
        sh("buildah", "rm", c, check=False)
    tar.unlink(missing_ok=True)
    podman("save", "--format", "docker-archive", "-o", tar, PAUSE_IMAGE)
    ctr("images", "import", "--no-unpack", tar)
    tar.unlink()


def import_images(images: list[str]) -> None:
    """Copy images from podman's store into containerd's (what `kind load` does for kind).
    Tags of one image are imported once and tagged in containerd. A tag whose podman image
    changed since it was imported (a rebuild) is imported again."""
    record = STATE / "containerd" / "imported.json"
    imported = json.loads(record.read_text()) if record.exists() else {}
    have = ctr_images()
    by_id: dict[str, list[str]] = {}
    for image in images:
        p = podman("image", "inspect", "--format", "{{.Id}}", image, check=False)
        if p.returncode != 0:
            raise NodeError(f"image {image} is not in podman's store: build it first (make image)")
        by_id.setdefault(p.stdout.strip(), []).append(image)
    for iid, tags in by_id.items():
        current = [t for t in tags if t in have and imported.get(t) == iid]
        missing = [t for t in tags if t not in current]
        if not missing:
            continue
        if not current:
            say(f"importing {missing[0]} into containerd (what `kind load` does) ...")
            t = time.monotonic()
            tar = STATE / "import.tar"
            tar.unlink(missing_ok=True)
            podman("save", "--format", "docker-archive", "-o", tar, missing[0])
            ctr("images", "import", tar)
            tar.unlink()
            say(f"imported {missing[0]} in {time.monotonic() - t:.0f}s")
            current, missing = [missing[0]], missing[1:]
        for tag in missing:
            ctr("images", "rm", tag, check=False)
            ctr("images", "tag", current[0], tag)
        imported.update({t: iid for t in tags})
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(imported, indent=1, sort_keys=True))


def trainer_images() -> list[str]:
    """The trainer image the chart uses by default (`tf-cluster-trainer:<tf>-cpu`, as `make image` tags it)
    and every other tag podman has for that same image (the content-pinned one)."""
    default = podman("images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}", TRAINER_REPO, check=False).stdout
    rows = [line.split() for line in default.splitlines() if line.strip()]
    latest = next(
        (iid for ref, iid in rows if ref.endswith(":" + os.environ.get("TF_VERSION", "2.21.0") + "-cpu")), None
    )
    return [ref for ref, iid in rows if iid == latest]


def up_node(ip: str, images: list[str]) -> None:
    ensure_network()
    start("containerd", ["containerd", "--config", containerd_config()])
    wait_for("containerd", lambda: SOCK.exists() and ctr("version").returncode == 0, 60, "containerd")
    ensure_pause_image()
    import_images([BASE_IMAGE] + images)
    for image in images:  # the chart's default repository is `tf-cluster-trainer` (docker.io/library on kind)
        short = "docker.io/library/" + image.split("/")[-1]
        ctr("images", "rm", short, check=False)
        ctr("images", "tag", image, short)
    kcfg = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{SOCK}",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "clusterDomain": "cluster.local",
        "clusterDNS": [GATEWAY],
        "resolvConf": "/etc/resolv.conf",
        "hairpinMode": "hairpin-veth",
        "serializeImagePulls": False,
        "maxPods": 110,
        # a CI disk may be nearly full: evict only when it truly is
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 99,
        "imageGCLowThresholdPercent": 98,
        "staticPodPath": str(STATE / "manifests"),
        "volumePluginDir": str(STATE / "kubelet-plugins"),
        "shutdownGracePeriod": "0s",
    }
    (STATE / "manifests").mkdir(exist_ok=True)
    (STATE / "kubelet.yaml").write_text(json.dumps(kcfg, indent=1))
    start(
        "kubelet",
        [
            BIN / "kubelet",
            f"--config={STATE / 'kubelet.yaml'}",
            f"--kubeconfig={kubeconfig('kubelet', f'https://127.0.0.1:{API_PORT}')}",
            f"--hostname-override={NODE}",
            f"--node-ip={ip}",
            f"--root-dir={STATE / 'kubelet'}",
            f"--cert-dir={STATE / 'kubelet-pki'}",
            "--v=1",
        ],
    )
    wait_for(f"node {NODE} Ready", lambda: node_ready(), 180, "kubelet", every=1)
    say(f"node {NODE} Ready")
    start(
        "kube-proxy",
        [
            BIN / "kube-proxy",
            f"--kubeconfig={kubeconfig('kube-proxy', f'https://127.0.0.1:{API_PORT}')}",
            f"--hostname-override={NODE}",
            f"--cluster-cidr={POD_CIDR}",
            "--proxy-mode=iptables",
            "--conntrack-max-per-core=0",
            "--bind-address=127.0.0.1",
            "--metrics-bind-address=127.0.0.1:10249",
            "--healthz-bind-address=127.0.0.1:10256",
        ],
    )


def node_ready() -> bool:
    node = api_get(f"/api/v1/nodes/{NODE}")
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))


def up_addons() -> None:
    corefile = STATE / "Corefile"
    corefile.write_text(f""".:53 {{
    bind {GATEWAY}
    errors
    health 127.0.0.1:18080
    ready 127.0.0.1:18181
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {KUBECONFIG} tf-cluster-node
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    forward . /etc/resolv.conf
    cache 5
}}
""")
    start("coredns", [BIN / "coredns", "-conf", corefile])
    wait_for(
        "CoreDNS ready",
        lambda: urllib.request.urlopen("http://127.0.0.1:18181/ready", timeout=2).status == 200,
        60,
        "coredns",
    )
    # Rancher's local-path-provisioner: kind's default storage. Its helper pods run the base image.
    kubectl("apply", "-f", "-", input=LOCAL_PATH_MANIFEST.format(path=STATE / "local-path", helper=BASE_IMAGE))
    start(
        "local-path-provisioner",
        [
            BIN / "local-path-provisioner",
            "--debug",
            "start",
            "--kubeconfig",
            KUBECONFIG,
            "--namespace",
            "local-path-storage",
            "--service-account-name",
            "local-path-provisioner",
            "--provisioner-name",
            "rancher.io/local-path",
            "--helper-image",
            BASE_IMAGE,
        ],
    )


LOCAL_PATH_MANIFEST = """
apiVersion: v1
kind: Namespace
metadata: {{name: local-path-storage}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: local-path-provisioner, namespace: local-path-storage}}
automountServiceAccountToken: false
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {{storageclass.kubernetes.io/is-default-class: "true"}}
provisioner: rancher.io/local-path
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: local-path-config, namespace: local-path-storage}}
data:
  config.json: '{{"sharedFileSystemPath": "{path}"}}'
  setup: |-
    #!/bin/sh
    set -eu
    mkdir -m 0777 -p "$VOL_DIR"
  teardown: |-
    #!/bin/sh
    set -eu
    rm -rf "$VOL_DIR"
  helperPod.yaml: |-
    apiVersion: v1
    kind: Pod
    metadata: {{name: helper-pod}}
    spec:
      containers:
      - name: helper-pod
        image: {helper}
        imagePullPolicy: Never
"""


# ---------------------------------------------------------------- verbs
def up(args) -> int:
    t0 = time.monotonic()
    if os.geteuid() != 0:
        raise NodeError("the node needs root (kubelet, containerd, iptables): run as root")
    say(f"building/checking binaries in {BIN} (cached after the first time)")
    b = subprocess.run(["bash", HERE / "build.sh"], env={**os.environ, "TF_CLUSTER_E2E_BIN": str(BIN)})
    if b.returncode != 0:
        raise NodeError("building the node's binaries failed (see the lines above)")
    images = args.image or trainer_images()
    if not images:
        raise NodeError(f"no trainer image in podman's store ({TRAINER_REPO}): run `make image` first")
    for d in (STATE, run, logs):
        d.mkdir(parents=True, exist_ok=True)
    ip = node_ip()
    ensure_pki(ip)
    kubeconfig("admin", f"https://127.0.0.1:{API_PORT}").replace(KUBECONFIG)
    up_control_plane(ip)
    up_node(ip, images)
    up_addons()
    wait_for(
        "the default ServiceAccount",
        lambda: kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0,
        60,
    )
    say(f"up in {time.monotonic() - t0:.1f}s: export KUBECONFIG={KUBECONFIG}")
    return 0


def status(args) -> int:
    ok = True
    for name in COMPONENTS:
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
    print(f"  kubeconfig                 {KUBECONFIG}")
    return 0 if ok else 1


def down(args) -> int:
    t0 = time.monotonic()
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
    for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
        stop(name)
    # mounts left by the kubelet and containerd, deepest first
    mounts = [
        line.split()[1]
        for line in Path("/proc/mounts").read_text().splitlines()
        if line.split()[1].startswith(str(STATE))
    ]
    for m in sorted(mounts, key=len, reverse=True):
        sh("umount", "-l", m, check=False)
    for ns in sh("ip", "netns", "list", check=False).stdout.split("\n"):
        if ns.startswith("cni-"):
            sh("ip", "netns", "delete", ns.split()[0], check=False)
    sh("iptables-save", check=False)  # kube-proxy's chains are flushed by `kube-proxy --cleanup`
    if (BIN / "kube-proxy").exists():
        sh(BIN / "kube-proxy", "--cleanup", check=False)
    keep = {"pki", "containerd"} if not args.purge else {"pki"}
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="node.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="verb", required=True)
    u = sub.add_parser("up")
    u.add_argument(
        "--image",
        action="append",
        help="trainer image(s) to import (default: every tf-cluster-trainer CPU tag in podman's store)",
    )
    u.set_defaults(func=up)
    sub.add_parser("status").set_defaults(func=status)
    d = sub.add_parser("down")
    d.add_argument("--purge", action="store_true", help="also remove the images imported into containerd")
    d.set_defaults(func=down)
    sub.add_parser("env").set_defaults(func=lambda a: print(f"export KUBECONFIG={KUBECONFIG}") or 0)
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except NodeError as e:
        print(f"[node] error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
