"""etcd, kube-apiserver, kube-controller-manager, kube-scheduler."""

from __future__ import annotations

from .config import API_PORT, BIN, ETCD_PEER, ETCD_PORT, MINOR, NODE, STATE, SVC_CIDR, pki
from .pki import kubeconfig
from .proc import api_get, say, start, wait_for

# Gang scheduling as a cluster operator turns it on in 1.37 (beta, off by default): the API group
# served by kube-apiserver, and the GenericWorkload gate on the API server (keeps pods'
# spec.schedulingGroup), the scheduler (its GangScheduling plugin) and the controller manager
# (removes PodGroups' protection finalizer).
GANG_API_FLAGS = ["--runtime-config=scheduling.k8s.io/v1beta1=true"] if MINOR >= (1, 37) else []
GANG_GATES = ["--feature-gates=GenericWorkload=true"] if MINOR >= (1, 37) else []


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
            *GANG_API_FLAGS,
            *GANG_GATES,
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
            *GANG_GATES,
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
            *GANG_GATES,
        ],
    )
