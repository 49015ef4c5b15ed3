"""`tf-cluster smoke`: install a values file on a real cluster, watch it finish, clean up.

    tf-cluster smoke -f values-examples/mwms-cpu.yaml --kind            # kind: create/reuse, build, load
    tf-cluster smoke -f values-examples/mwms-cpu.yaml --kubeconfig K    # any cluster (CI's own node)

Every step but three (create the kind cluster, load the image into it, delete it)
is the cluster runner's (tf_cluster.runner.cluster): namespace, `helm install`,
wait on Job conditions by type with live progress, `helm test`, logs and events
of what failed, `helm uninstall` (unless --keep).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from .. import IMAGES, imagebuild, images, work_dir
from ..errors import RunError, ToolMissing, UsageError
from ..helm import Helm, Values
from ..runner.cluster import ClusterRunner
from ..values import add_values_args, values_from
from . import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "smoke",
        help="install a values file on a real cluster and wait for the run to finish",
        description=__doc__.split("\n\n")[0],
    )
    add_values_args(p, required=True)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--kind",
        nargs="?",
        const="tf-cluster",
        metavar="NAME",
        help="use (or create) the kind cluster NAME (default tf-cluster); builds and loads the image",
    )
    target.add_argument("--kubeconfig", type=Path, help="an existing cluster; its nodes must have the image")
    p.add_argument(
        "-n",
        "--namespace",
        default="tf-cluster-smoke",
        help="namespace (created if missing; deleted afterwards if it was)",
    )
    p.add_argument("--release", default="smoke", help="Helm release name (default smoke)")
    p.add_argument("--timeout", type=float, default=900, help="seconds to wait for every Job to finish")
    p.add_argument("--no-helm-test", dest="helm_test", action="store_false", help="skip `helm test`")
    p.add_argument("--keep", action="store_true", help="leave the release (and namespace) installed")
    p.add_argument("--image", help="[--kind] use this image instead of building one (must be loadable by kind)")
    p.add_argument(
        "--base",
        default=os.environ.get("TF_CLUSTER_BASE_IMAGE", images.DEFAULT_BASE),
        help=f"[--kind] base image of the image it builds (default $TF_CLUSTER_BASE_IMAGE or {images.DEFAULT_BASE}; "
        f"without a registry: bash {IMAGES / 'base' / 'make-base.sh'}, as `make image` does)",
    )
    p.add_argument(
        "--requirements",
        type=Path,
        metavar="FILE",
        help="[--kind] pip requirements your program needs, baked into the image it builds",
    )
    p.add_argument("--delete-cluster", action="store_true", help="[--kind] delete the kind cluster at the end")
    p.add_argument(
        "--kind-node-image",
        default=os.environ.get("TF_CLUSTER_KIND_NODE_IMAGE"),
        help="[--kind] node image of a cluster it creates (kind's --image; default kind's own, or "
        "$TF_CLUSTER_KIND_NODE_IMAGE; without a registry: hack/kind/build-node-image.sh makes one)",
    )
    p.add_argument("--kind-config", type=Path, help="[--kind] kind cluster config of a cluster it creates (--config)")
    p.set_defaults(func=run)


class Step:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self, msg: str) -> None:
        print(f"[smoke {time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)


def sh(argv: Sequence[str | Path], say: Step, what: str, capture: bool = True) -> str:
    proc = subprocess.run([str(a) for a in argv], capture_output=capture, text=True)
    if proc.returncode != 0:
        raise RunError(f"{what} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout or '').strip()[-2000:]}")
    return proc.stdout or ""


# ------------------------------------------------------------------ kind-only steps
def kind_up(name: str, say: Step, node_image: str | None = None, config: Path | None = None) -> Path:
    exe = shutil.which("kind")
    if not exe:
        raise ToolMissing("kind not found: install it (https://kind.sigs.k8s.io) or use --kubeconfig")
    if name in sh([exe, "get", "clusters"], say, "kind get clusters").split():
        say(f"reusing kind cluster {name}")
    else:
        say(f"creating kind cluster {name} (about a minute){f' from {node_image}' if node_image else ''}")
        argv = [exe, "create", "cluster", "--name", name, "--wait", "180s"]
        argv += ["--image", node_image] if node_image else []
        argv += ["--config", str(config)] if config else []
        t = time.monotonic()
        sh(argv, say, "kind create cluster", capture=False)
        say(f"kind cluster {name} created in {time.monotonic() - t:.0f}s")
    kubeconfig = work_dir("build") / f"kind-{name}.kubeconfig"
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    kubeconfig.write_text(sh([exe, "get", "kubeconfig", "--name", name], say, "kind get kubeconfig"))
    return kubeconfig


def kind_load(
    name: str, image: str | None, say: Step, requirements: Path | None = None, base: str = images.DEFAULT_BASE
) -> str:
    """Build the CPU image (unless given; with `requirements` baked in) and load it into the kind
    nodes; returns the image reference."""
    if not image:
        ca_bundle = imagebuild.default_ca_bundle()  # as `tf-cluster build`: pip trusts it through a build secret
        ctx = images.assemble("cpu", base=base, extra_requirements=requirements, ca_secret=bool(ca_bundle))
        builder = imagebuild.detect_builder()
        say(f"building {ctx.pinned_image} with {builder}")
        imagebuild.stream(imagebuild.build_argv(builder, ctx, ca_bundle), f"{builder} build")
        image = imagebuild.local_name(builder, ctx.pinned_image)  # podman's localhost/<repo>: load that name
    say(f"loading {image} into kind cluster {name}")
    imagebuild.load_into_kind(image, name, lambda argv, what: sh(argv, say, what))
    return image


def kind_down(name: str, say: Step) -> None:
    say(f"deleting kind cluster {name}")
    sh(["kind", "delete", "cluster", "--name", name], say, "kind delete cluster")


# ------------------------------------------------------------------ the run
def run(args: argparse.Namespace) -> int:
    say = Step()
    for f in args.values:
        if not f.is_file():
            raise UsageError(f"values file {f} not found")
    values = values_from(args)
    if args.requirements and not (args.kind and not args.image):
        raise UsageError(
            f"--requirements {args.requirements}: smoke bakes requirements only into the image it builds "
            "for --kind. For another cluster build and push that image yourself (tf-cluster build "
            "--requirements FILE --repository REPO --push) and pass --set image.repository=REPO "
            "--set image.tag=TAG."
        )
    if args.requirements and not args.requirements.is_file():
        raise UsageError(f"--requirements {args.requirements}: no such file")
    if args.kind:
        if args.kind_config and not args.kind_config.is_file():
            raise UsageError(f"--kind-config {args.kind_config}: no such file")
        args.kubeconfig = kind_up(args.kind, say, args.kind_node_image, args.kind_config)
        image = kind_load(args.kind, args.image, say, args.requirements, args.base)
        repo, tag = image.rsplit(":", 1)
        values = values.plus(Values(set=(f"image.repository={repo}", f"image.tag={tag}")))
    elif not Path(args.kubeconfig).is_file():
        raise UsageError(f"kubeconfig {args.kubeconfig} not found")
    runner = ClusterRunner(
        Helm(args.helm, kubeconfig=args.kubeconfig, namespace=args.namespace),
        args.release,
        values,
        keep=args.keep,
        say=say,
    )
    ok = False
    try:
        runner.start()
        report = runner.watch(args.timeout, on_update=say)
        if not report.ok:
            raise RunError("Job(s) failed: " + "; ".join(report.failures()))
        say("every Job Complete: " + ", ".join(j.name for j in report.jobs))
        print(report.table(), flush=True)
        if args.helm_test:
            runner.check()
        ok = True
    except Exception:
        try:
            print(runner.diagnostics(), flush=True)
        except Exception as e:  # noqa: BLE001 - diagnostics must not hide the real error
            print(f"(could not collect diagnostics: {e})")
        raise
    finally:
        try:
            runner.stop()
        except RunError as e:
            say(f"cleanup failed: {e}")
        if args.kind and args.delete_cluster:
            kind_down(args.kind, say)
    say(f"PASSED in {time.monotonic() - say.t0:.0f}s" if ok else "FAILED")
    return 0 if ok else 7
