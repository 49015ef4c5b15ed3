"""`tf-cluster smoke`: install a values file on a real cluster, watch it finish, clean up.

    tf-cluster smoke -f values-examples/mwms-cpu.yaml --kind            # kind: create/reuse, build, load
    tf-cluster smoke -f values-examples/mwms-cpu.yaml --kubeconfig K    # any cluster (CI's own node)

Every step but three (create the kind cluster, load the image into it, delete it)
is the same on both paths: namespace, `helm install`, wait on Job conditions by
type with live progress, `helm test`, logs and events of what failed, `helm
uninstall` (unless --keep).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .. import CHART, ROOT, helm, images, kube
from ..errors import RunError, ToolMissing, UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("smoke", help="install a values file on a real cluster and wait for the run to finish",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("-f", "--values", action="append", default=[], type=Path, required=True, help="values file(s)")
    p.add_argument("--set", action="append", default=[], metavar="K=V", help="extra --set for helm")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--kind", nargs="?", const="tf-cluster", metavar="NAME",
                        help="use (or create) the kind cluster NAME (default tf-cluster); builds and loads the image")
    target.add_argument("--kubeconfig", type=Path, help="an existing cluster; its nodes must have the image")
    p.add_argument("-n", "--namespace", default="tf-cluster-smoke", help="namespace (created if missing; "
                                                                          "deleted afterwards if it was)")
    p.add_argument("--release", default="smoke", help="Helm release name (default smoke)")
    p.add_argument("--helm", choices=["4", "3"], default="4", help="Helm major version to use (default 4)")
    p.add_argument("--timeout", type=float, default=900, help="seconds to wait for every Job to finish")
    p.add_argument("--no-helm-test", dest="helm_test", action="store_false", help="skip `helm test`")
    p.add_argument("--keep", action="store_true", help="leave the release (and namespace) installed")
    p.add_argument("--image", help="[--kind] use this image instead of building one (must be loadable by kind)")
    p.add_argument("--delete-cluster", action="store_true", help="[--kind] delete the kind cluster at the end")
    p.set_defaults(func=run)


class Step:
    def __init__(self):
        self.t0 = time.monotonic()

    def __call__(self, msg: str) -> None:
        print(f"[smoke {time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)


def sh(argv: list, say: Step, what: str, capture: bool = True) -> str:
    proc = subprocess.run([str(a) for a in argv], capture_output=capture, text=True)
    if proc.returncode != 0:
        raise RunError(f"{what} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout or '').strip()[-2000:]}")
    return proc.stdout or ""


# ------------------------------------------------------------------ kind-only steps
def kind_up(name: str, say: Step) -> Path:
    exe = shutil.which("kind")
    if not exe:
        raise ToolMissing("kind not found: install it (https://kind.sigs.k8s.io) or use --kubeconfig")
    if name in sh([exe, "get", "clusters"], say, "kind get clusters").split():
        say(f"reusing kind cluster {name}")
    else:
        say(f"creating kind cluster {name} (about a minute)")
        sh([exe, "create", "cluster", "--name", name, "--wait", "180s"], say, "kind create cluster", capture=False)
    kubeconfig = ROOT / "build" / f"kind-{name}.kubeconfig"
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    kubeconfig.write_text(sh([exe, "get", "kubeconfig", "--name", name], say, "kind get kubeconfig"))
    return kubeconfig


def kind_load(name: str, image: str | None, say: Step) -> str:
    """Build the CPU image (unless given) and load it into the kind nodes; returns the image reference."""
    from . import build
    if not image:
        ctx = images.assemble("cpu")
        builder = build.detect_builder()
        say(f"building {ctx.pinned_image} with {builder}")
        build.stream(build.build_argv(builder, ctx, build.default_ca_bundle()), f"{builder} build")
        image = ctx.pinned_image
        if builder == "podman":  # podman names it localhost/<repo>: load that exact name
            image = f"localhost/{image}"
    say(f"loading {image} into kind cluster {name}")
    if shutil.which("docker") and subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0:
        sh(["kind", "load", "docker-image", image, "--name", name], say, "kind load docker-image")
    else:
        with tempfile.TemporaryDirectory() as d:
            tar = Path(d) / "image.tar"
            sh(["podman", "save", "-o", tar, image], say, "podman save")
            sh(["kind", "load", "image-archive", tar, "--name", name], say, "kind load image-archive")
    return image


def kind_down(name: str, say: Step) -> None:
    say(f"deleting kind cluster {name}")
    sh(["kind", "delete", "cluster", "--name", name], say, "kind delete cluster")


# ------------------------------------------------------------------ shared steps
def ensure_namespace(api, namespace: str, say: Step) -> bool:
    from kubernetes import client
    core = client.CoreV1Api(api)
    try:
        core.read_namespace(namespace)
        say(f"namespace {namespace} exists")
        return False
    except client.ApiException as e:
        if e.status != 404:
            raise RunError(f"cannot read namespace {namespace}: {e.reason}") from e
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    say(f"namespace {namespace} created")
    return True


def helm_argv(args, *rest) -> list[str]:
    return [helm.helm_binary(args.helm), "--kubeconfig", str(args.kubeconfig), "-n", args.namespace, *rest]


def install(args, set_values: list[str], say: Step) -> None:
    argv = helm_argv(args, "install", args.release, str(CHART))
    for f in args.values:
        argv += ["-f", str(f)]
    for s in set_values:
        argv += ["--set", s]
    say(f"helm {args.helm} install {args.release} -n {args.namespace} " + " ".join(f"-f {f}" for f in args.values))
    sh(argv, say, "helm install")


def helm_test(args, api, say: Step) -> None:
    """`helm test`. Not `--logs`: Helm 3.17 fetches logs after a passed test's Pod is deleted
    (the chart's default hook-delete policy); a failed test's Pod is kept, and we print its log."""
    say("helm test")
    proc = subprocess.run(helm_argv(args, "test", args.release, "--timeout", "5m"), capture_output=True, text=True)
    phase = next((ln.split(":", 1)[1].strip() for ln in proc.stdout.splitlines() if ln.strip().startswith("Phase:")), "?")
    if proc.returncode == 0:
        say(f"helm test passed (test Pod phase {phase})")
        return
    from kubernetes import client
    core = client.CoreV1Api(api)
    text = ""
    for pod in core.list_namespaced_pod(args.namespace, label_selector=f"{kube.INSTANCE}={args.release},"
                                                                      f"{kube.COMPONENT}=test").items:
        try:
            text += f"--- {pod.metadata.name}:\n" + core.read_namespaced_pod_log(pod.metadata.name, args.namespace,
                                                                                 tail_lines=30)
        except Exception:  # noqa: BLE001 - the error below is what matters
            text += f"--- {pod.metadata.name}: (no log)\n"
    raise RunError(f"helm test failed (phase {phase}): {(proc.stderr or proc.stdout).strip()[-800:]}\n{text}")


def uninstall(args, api, created_ns: bool, say: Step) -> None:
    say(f"helm uninstall {args.release}")
    sh(helm_argv(args, "uninstall", args.release, "--wait", "--timeout", "3m"), say, "helm uninstall")
    if created_ns:
        from kubernetes import client
        client.CoreV1Api(api).delete_namespace(args.namespace)
        say(f"namespace {args.namespace} deleted")


def run(args) -> int:
    say = Step()
    for f in args.values:
        if not f.is_file():
            raise UsageError(f"values file {f} not found")
    set_values = list(args.set)
    if args.kind:
        args.kubeconfig = kind_up(args.kind, say)
        image = kind_load(args.kind, args.image, say)
        repo, tag = image.rsplit(":", 1)
        set_values += [f"image.repository={repo}", f"image.tag={tag}"]
    elif not Path(args.kubeconfig).is_file():
        raise UsageError(f"kubeconfig {args.kubeconfig} not found")
    api = kube.client_for(str(args.kubeconfig))
    created = ensure_namespace(api, args.namespace, say)
    ok = False
    try:
        install(args, set_values, say)
        say("waiting for every Job to reach Complete or Failed (progress every 15 s)")
        snap = kube.wait_for_jobs(api, args.namespace, args.release, timeout=args.timeout, say=say)
        failed = [n for n, s in snap.states().items() if s == "Failed"]
        if failed:
            raise RunError("Job(s) failed: " + "; ".join(f"{n}: {kube.failed_reason(snap.jobs[n])}" for n in failed))
        say("every Job Complete: " + ", ".join(sorted(snap.jobs)))
        if args.helm_test:
            helm_test(args, api, say)
        ok = True
    except Exception:
        try:
            print(kube.diagnostics(api, args.namespace, args.release), flush=True)
        except Exception as e:  # noqa: BLE001 - diagnostics must not hide the real error
            print(f"(could not collect diagnostics: {e})")
        raise
    finally:
        if args.keep:
            say(f"kept: helm -n {args.namespace} uninstall {args.release}  (KUBECONFIG={args.kubeconfig})")
        else:
            try:
                uninstall(args, api, created, say)
            except RunError as e:
                say(f"cleanup failed: {e}")
        if args.kind and args.delete_cluster:
            kind_down(args.kind, say)
    say(f"PASSED in {time.monotonic() - say.t0:.0f}s" if ok else "FAILED")
    return 0 if ok else 7
