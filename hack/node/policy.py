"""The NetworkPolicy engine: Cilium's agent as a host process, its CNI plugin chained after the
bridge (generic-veth), so NetworkPolicies are enforced on the node as on a production cluster.

Built by build.sh (`cilium`) from github.com/cilium/cilium; the agent compiles its BPF programs
with Debian's clang-19 when it starts. No operator: the CRDs are applied here (in 1.20 only the
operator registers them) and identities are CRDs. `clean_up` removes what the agent leaves in
the host (BPF pins and links, iptables chains, cilium_host), so `down` leaves the host as it was.
"""

from __future__ import annotations

import http.client
import json
import shlex
import shutil
import socket
from pathlib import Path

from .config import (
    BRIDGE,
    CILIUM_DIR,
    CILIUM_VERSION,
    CLUSTER_POD_CIDR,
    GATEWAY,
    HOST_NODE,
    KUBECONFIG,
    STATE,
    Node,
)
from .pki import kubeconfig
from .proc import NodeError, kubectl, mount_table, node_ip, pid_of, say, sh, start, stop, wait_for

RUN = Path("/var/run/cilium")  # the agent's state; cilium-cni finds the agent's API socket here
SOCK = RUN / "cilium.sock"
BPFFS = Path("/sys/fs/bpf")
CGROUP2 = next(p for p in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")) if (p / "cgroup.procs").exists())
LLVM = {"clang": "clang-19", "llc": "llc-19", "llvm-objcopy": "llvm-objcopy-19"}
METRICS_PORT = 9962  # the agent's Prometheus metrics (its default port)
DROP_LOG = STATE.parent / f"{STATE.name}-cilium-drops.jsonl"  # beside the node's state: kept by `down`


def run_dir(node: Node) -> Path:
    """The agent's state directory (its API socket, which cilium-cni finds by CILIUM_SOCK elsewhere)."""
    return RUN if node.host else node.state / "cilium"


def drop_log(node: Node) -> Path:
    return DROP_LOG if node.host else node.state.parent / f"{node.name}-cilium-drops.jsonl"


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost")
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(str(self.path))


def agent_status(node: Node = HOST_NODE) -> dict:
    """The agent's own health (GET /v1/healthz on its API socket)."""
    conn = _UnixHTTP(run_dir(node) / "cilium.sock")
    conn.request("GET", "/v1/healthz")
    return json.loads(conn.getresponse().read())


def agent_ok(node: Node = HOST_NODE) -> bool:
    return agent_status(node).get("cilium", {}).get("state") == "Ok"


def drops() -> dict[str, float]:
    """Packets the datapath dropped so far, by "reason, direction" (cilium_drop_count_total)."""
    import re
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for m in re.finditer(r"^cilium_drop_count_total\{([^}]*)\} (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        key = f"{labels.get('reason')}, {labels.get('direction')}"
        out[key] = out.get(key, 0) + float(m.group(2))
    return out


def pod_route(source: str, node: Node = HOST_NODE) -> None:
    """The node's route to its pods (the bridge's connected route) with this source address."""
    ip = ["ip"] if node.host else ["ip", "-n", node.netns]
    sh(*ip, "route", "replace", node.pod_cidr, "dev", BRIDGE, "proto", "kernel", "scope", "link", "src", source)


def bpf_root(node: Node) -> Path:
    """A BPF filesystem of the node's own: another node's agent pins its maps under the same names."""
    if node.host:
        return BPFFS
    root = node.state / "bpf"
    root.mkdir(parents=True, exist_ok=True)
    if not any(point == str(root) for point, _ in mount_table()):
        sh("mount", "-t", "bpf", "bpffs", root)
    return root


def up_policy_engine(node: Node = HOST_NODE) -> None:
    for exe in ("cilium-agent", "cilium-cni"):
        if not (CILIUM_DIR / exe).exists():
            raise NodeError(f"{CILIUM_DIR / exe} is missing: `bash hack/node/build.sh cilium` builds it")
    llvm = STATE / "cilium-llvm"  # clang/llc as the agent calls them: Debian's clang-19
    llvm.mkdir(parents=True, exist_ok=True)
    for name, versioned in LLVM.items():
        found = shutil.which(versioned)
        if not found:
            raise NodeError(f"{versioned} is missing (the agent compiles BPF with it): apt install clang-19 llvm-19")
        link = llvm / name
        link.unlink(missing_ok=True)
        link.symlink_to(found)
    kubectl("apply", "--server-side", "--force-conflicts", "-f", CILIUM_DIR / "crds")
    name, log = node.proc("cilium-agent"), drop_log(node)
    if not pid_of(name):  # a running agent writes to it: removing it would lose its drops
        for old in log.parent.glob(f"{log.stem}*"):  # this node's drops only (and rotated ones)
            old.unlink()
    kcfg = KUBECONFIG if node.host else kubeconfig("admin", node.api, node.state / "admin.kubeconfig")
    # Another node's agent gets a mount namespace of its own with its state directory at the
    # agent's fixed runtime path (/var/run/cilium: its API, health and shell sockets are there
    # whatever --state-dir says); the node's containerd gives cilium-cni its socket (CILIUM_SOCK).
    own_run = []
    if not node.host:
        run_dir(node).mkdir(parents=True, exist_ok=True)
        RUN.mkdir(parents=True, exist_ok=True)
        own_run = ["unshare", "--mount", "--propagation", "slave", "--", "sh", "-c"]
        own_run += [f'mount --bind "{run_dir(node)}" {RUN} && exec "$@"', "sh"]
    start(
        name,
        [
            *own_run,
            CILIUM_DIR / "cilium-agent",
            f"--k8s-kubeconfig-path={kcfg}",
            "--cni-chaining-mode=generic-veth",  # behind the bridge plugin, which wires the pods
            "--ipam=delegated-plugin",  # the bridge's host-local hands out the addresses
            "--local-router-ipv4=169.254.23.1",
            "--routing-mode=native",
            f"--ipv4-native-routing-cidr={CLUSTER_POD_CIDR}",  # pods on other nodes: routed, not masqueraded
            "--enable-ipv4-masquerade=false",  # the bridge masquerades
            "--enable-ipv6=false",
            "--kube-proxy-replacement=false",  # kube-proxy serves Services
            "--identity-allocation-mode=crd",  # no kvstore, no operator
            "--enable-l7-proxy=false",  # no Envoy (C++, not built here)
            "--enable-endpoint-health-checking=false",
            f"--cgroup-root={CGROUP2}",
            f"--bpf-root={bpf_root(node)}",
            f"--lib-dir={CILIUM_DIR}",  # its BPF sources, in bpf/
            f"--state-dir={RUN}",
            f"--prometheus-serve-addr=127.0.0.1:{METRICS_PORT}",  # drops by reason: drops()
            # every dropped packet (source, destination, identities, reason) to a log that `down` keeps
            "--enable-hubble=true",
            f"--hubble-export-file-path={log}",
            '--hubble-export-allowlist={"verdict":["DROPPED"]}',
            # only drops leave the datapath as events: with traces and policy verdicts on (the
            # defaults) Hubble parsed every flow to export none of them, its queue overflowed
            # ("hubble events queue is full") and the three agents took 0.3 of the two cores in a
            # soak of the suite; off, the agents used 2.1 and 2.7 CPU-s in one MWMS scenario
            # where they used 3.7 and 4.5 (Cilium added these flags for this: its PR 30063)
            "--bpf-events-trace-enabled=false",
            "--bpf-events-policy-verdict-enabled=false",
        ],
        env={
            "K8S_NODE_NAME": node.name,
            "PATH": f"{llvm}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        },
        netns=None if node.host else node.netns,
    )
    # The host reaches pods from the node's IP, which Cilium knows as the host (as on a cluster,
    # where the kubelet's probes come from a node IP), not from the bridge's gateway address,
    # which is "world" to it: a policy with `from:` peers would drop the kubelet's probes.
    # (Naming the bridge in --devices instead made the agent's programs on it drop pods'
    # API replies for ~35 s at a time: 12 of 150 requests timed out.)
    pod_route(node_ip() if node.host else node.ip, node)
    wait_for(
        f"Cilium's agent on {node.name} ready (it compiles its BPF programs first)",
        lambda: agent_ok(node),
        240,
        name,
        every=1,
    )
    say(f"cilium-agent ready on {node.name}: NetworkPolicies are enforced (Cilium {CILIUM_VERSION})")


def clean_up() -> None:
    """After the agent stopped: its BPF pins (a link pinned there keeps a program on the host's
    interface), iptables chains and cilium_host/cilium_net, and its state."""
    stop("cilium-agent", timeout=30)
    for pinned in (BPFFS / "cilium", BPFFS / "tc"):
        shutil.rmtree(pinned, ignore_errors=True)
    for table in ("filter", "nat", "mangle", "raw"):
        dump = sh("iptables-save", "-t", table, check=False).stdout.splitlines()
        for rule in dump:  # jumps from the built-in chains into Cilium's
            if rule.startswith("-A ") and "CILIUM" in rule and not rule.split()[1].startswith("CILIUM"):
                sh("iptables", "-t", table, "-D", *shlex.split(rule[3:]), check=False)
        chains = [line[1:].split()[0] for line in dump if line.startswith(":CILIUM")]
        for chain in chains:
            sh("iptables", "-t", table, "-F", chain, check=False)
        for chain in chains:
            sh("iptables", "-t", table, "-X", chain, check=False)
    if sh("ip", "link", "show", "cilium_host", check=False).returncode == 0:
        sh("ip", "link", "delete", "cilium_host", check=False)  # and its peer cilium_net
    shutil.rmtree(RUN, ignore_errors=True)
    if sh("ip", "link", "show", BRIDGE, check=False).returncode == 0:  # the bridge's own source again
        pod_route(GATEWAY)
