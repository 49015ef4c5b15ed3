"""`tf-cluster package` / `publish` / `release`: the chart as a reproducible, optionally signed .tgz, pushed
to an OCI registry (see tf_cluster.release for the version policy and how the bytes are fixed)."""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

from .. import ROOT, checkout, helm, release
from ..errors import UsageError
from . import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "package",  # a maintainer's verb: no `help`, so the user's listing leaves it out (cli.MAINTAINER)
        description=__doc__,
    )
    p.add_argument("-d", "--destination", type=Path, default=ROOT / "build" / "package", help="output folder")
    p.add_argument("--key", help="sign with this GnuPG key (name or email): writes a .prov beside the .tgz")
    p.add_argument("--keyring", type=Path, help="secret keyring for --key (gpg --export-secret-keys > secring.gpg)")
    p.add_argument("--passphrase-file", type=Path, help="the key's passphrase, if it has one")
    p.add_argument("--helm", choices=helm.MAJORS, default="4", help="Helm major version (default 4)")
    p.set_defaults(func=run_package)

    p = sub.add_parser("publish", description="Push the packaged chart (and its .prov) to an OCI registry.")
    p.add_argument("remote", help="oci://<registry>/<path>, e.g. oci://ghcr.io/acme/charts")
    p.add_argument("--package", type=Path, help="the .tgz (default: the one `tf-cluster package` made)")
    p.add_argument("--plain-http", action="store_true", help="the registry speaks HTTP (a local test registry)")
    p.add_argument("--helm", choices=helm.MAJORS, default="4", help="Helm major version (default 4)")
    p.set_defaults(func=run_publish)

    p = sub.add_parser(
        "release",
        description="Checks the version policy and the CHANGELOG date, appends the version, its chart "
        "tree and package time to charts/releases.yaml and tags HEAD tf-cluster-<version>.",
    )
    p.add_argument("--no-tag", action="store_true", help="record only; tag yourself")
    p.set_defaults(func=run_release)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_package(args: argparse.Namespace) -> int:
    checkout("package")
    print(f"[package] version policy: {release.check_version()}", flush=True)
    if args.keyring and not args.key:
        raise UsageError("--keyring is for signing: give --key NAME too")
    epoch = release.source_epoch()
    args.destination.mkdir(parents=True, exist_ok=True)
    h = helm.Helm(args.helm)
    tgz = release.package(
        args.destination,
        major=args.helm,
        sign_key=args.key,
        keyring=args.keyring,
        passphrase_file=args.passphrase_file,
    )
    print(f"[package] {tgz}  sha256 {sha256(tgz)}  (file times {epoch}, Helm {h.version()})", flush=True)
    if args.key:
        print(f"[package] signed by {args.key!r}: {tgz}.prov (helm verify --keyring PUBRING {tgz})", flush=True)
    return 0


def run_publish(args: argparse.Namespace) -> int:
    if not args.remote.startswith("oci://"):
        raise UsageError(f"{args.remote}: give an OCI reference, oci://<registry>/<path>")
    tgz = args.package or checkout("publish") / "build" / "package" / f"tf-cluster-{release.chart_version()}.tgz"
    if not tgz.is_file():
        raise UsageError(f"{tgz} not found: run `tf-cluster package` (make package) first")
    r = helm.Helm(args.helm).push(tgz, args.remote, plain_http=args.plain_http, check=False)
    if r.returncode != 0:
        raise UsageError(f"helm push {tgz} {args.remote} failed: {helm.clean_helm_error(r.stderr)}")
    out = r.stdout + r.stderr
    digest = re.search(r"Digest: (sha256:[0-9a-f]{64})", out)
    pushed = re.search(r"Pushed: (\S+)", out)
    print(f"[publish] {pushed.group(1) if pushed else args.remote} {digest.group(1) if digest else ''}".rstrip())
    if digest:
        ref = f"{args.remote}/tf-cluster"
        print(f"[publish] install it: helm install NAME {ref} --version {release.chart_version()}")
        print(f"[publish]        or: helm install NAME {ref}@{digest.group(1)}", file=sys.stdout, flush=True)
    return 0


def run_release(args: argparse.Namespace) -> int:
    checkout("release")
    r = release.record_release(tag=not args.no_tag)
    print(f"[release] {r.version}: chart tree {r.tree}, package time {r.epoch}, recorded in charts/releases.yaml")
    print(f"[release] next: git commit charts/releases.yaml; git push origin {r.tag}; make package publish")
    return 0
