"""The node's certificates and kubeconfigs (a CA, the API server's serving cert, one client cert per component)."""

from __future__ import annotations

import json
from pathlib import Path

from .config import API_SVC_IP, NODE, NODE_NET_GW, STATE, Node, pki
from .proc import sh


def make_ca(into: Path, cn: str, days: int) -> None:
    """A self-signed CA, into/ca.key and into/ca.crt."""
    sh(
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        into / "ca.key",
        "-out",
        into / "ca.crt",
        "-days",
        str(days),
        "-subj",
        f"/CN={cn}",
    )


def make_sa_keys(into: Path) -> None:
    """The service-account token signing key pair, into/sa.key and into/sa.pub."""
    sh("openssl", "genrsa", "-out", into / "sa.key", "2048")
    sh("openssl", "rsa", "-in", into / "sa.key", "-pubout", "-out", into / "sa.pub")


def loopback_apiserver_pki(into: Path, cn: str, days: int, admin_token: str) -> None:
    """All a kube-apiserver on 127.0.0.1 needs, in `into`: a CA (ca.crt), its serving certificate
    (srv.crt/srv.key for 127.0.0.1 and localhost), the service-account keys (sa.key/sa.pub) and a
    token file (tokens.csv) with `admin_token` in system:masters. The simulated cluster (sim.py)
    and the API suite (tests/e2e/test_apiserver.py) run one."""
    make_ca(into, cn, days)
    sign_cert(into, "srv", "/CN=kube-apiserver", "IP:127.0.0.1,DNS:localhost", days)
    make_sa_keys(into)
    (into / "tokens.csv").write_text(f"{admin_token},admin,admin,system:masters\n")


def token_kubeconfig(path: Path, server: str, ca: Path, token: str, name: str) -> Path:
    """A kubeconfig at `path` for `server` (trusting `ca`) with a bearer token; context `name`."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": name,
                "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority": str(ca)}}],
                "users": [{"name": "admin", "user": {"token": token}}],
                "contexts": [{"name": name, "context": {"cluster": name, "user": "admin"}}],
            },
            indent=1,
        )
    )
    return path


def ensure_pki(ip: str) -> None:
    pki.mkdir(parents=True, exist_ok=True)
    if not (pki / "ca.crt").exists():
        make_ca(pki, "tf-cluster-node-ca", 3650)
    if not (pki / "sa.key").exists():
        make_sa_keys(pki)
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
    sign_cert(pki, name, subj, san, 3650)


def sign_cert(into: Path, name: str, subj: str, san: str | None, days: int) -> None:
    """into/<name>.key and into/<name>.crt for `subj` (and `san`), signed by into/ca.crt."""
    sh(
        "openssl",
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        into / f"{name}.key",
        "-out",
        into / f"{name}.csr",
        "-subj",
        subj,
    )
    ext = into / f"{name}.ext"
    ext.write_text((f"subjectAltName={san}\n" if san else "") + "extendedKeyUsage=serverAuth,clientAuth\n")
    sh(
        "openssl",
        "x509",
        "-req",
        "-in",
        into / f"{name}.csr",
        "-CA",
        into / "ca.crt",
        "-CAkey",
        into / "ca.key",
        "-CAcreateserial",
        "-out",
        into / f"{name}.crt",
        "-days",
        str(days),
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
