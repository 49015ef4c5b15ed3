"""The node's certificates and kubeconfigs (a CA, the API server's serving cert, one client cert per component)."""

from __future__ import annotations

import json
from pathlib import Path

from .config import API_SVC_IP, NODE, NODE_NET_GW, STATE, Node, pki
from .proc import sh


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
        [f"IP:{x}" for x in ("127.0.0.1", ip, API_SVC_IP, NODE_NET_GW)]
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
        _cert(name, subj, san)


def node_certs(node: Node) -> tuple[str, str]:
    """The kubelet's client and serving certificates of another node: their names in pki/."""
    client, serving = f"kubelet@{node.name}", f"kubelet-serving@{node.name}"
    _cert(client, f"/O=system:nodes/CN=system:node:{node.name}", None)
    _cert(serving, f"/CN={node.name}", f"IP:{node.ip},DNS:{node.name}")
    return client, serving


def _cert(name: str, subj: str, san: str | None) -> None:
    """pki/<name>.crt signed by the CA, unless one with every address of `san` is there."""
    crt = pki / f"{name}.crt"
    if crt.exists():
        have = (
            ""
            if san is None
            else sh("openssl", "x509", "-in", crt, "-noout", "-ext", "subjectAltName", check=False).stdout
        )
        if san is None or all(x.split(":", 1)[1] in have for x in san.split(",")):
            return
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


def kubeconfig(name: str, server: str, path: Path | None = None) -> Path:
    """A kubeconfig for the client certificate pki/<name>.crt (written to `path`, default STATE/<name>.kubeconfig)."""
    path = path or STATE / f"{name}.kubeconfig"
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
