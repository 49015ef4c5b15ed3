"""Image sizes and rebuild time: the CPU trainer image (`make image`) beside plain images a user
would make on the same base (`pip install tensorflow`, and `pip install tensorflow-cpu`, the package
the trainer image holds), and the time to rebuild the trainer image when only a trainer script
changed (an edited copy of the build context, tagged apart and removed afterwards).

.venv/bin/python tests/bench/bench_images.py [--base IMAGE]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import save, say, table

from tf_cluster import images
from tf_cluster.imagebuild import build_argv, default_ca_bundle, detect_builder, podman_flags

PLAIN = {  # tag: what a user would write without tf-cluster
    "tensorflow": "tensorflow=={v}",
    "tensorflow-cpu": "tensorflow-cpu=={v}",
}


def exe(builder: str) -> list[str]:
    return ["podman", *podman_flags()] if builder in ("podman", "buildah") else [builder]


def inspect(builder: str, image: str, field: str) -> str:
    """One field of `image inspect` (`Size`, `Id`); exits when the image is not there."""
    argv = [*exe(builder), "image", "inspect", "--format", "{{." + field + "}}", image]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"no image {image}: build it first (make image)\n{r.stderr}")
    return r.stdout.strip()


def size(builder: str, image: str) -> int:
    return int(inspect(builder, image, "Size"))


def build(argv: list[str], what: str) -> float:
    say(f"building {what} ...")
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{what} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    seconds = time.monotonic() - t0
    say(f"  {what}: {seconds:.1f}s")
    return seconds


def plain_image(builder: str, base: str, package: str, ca: Path | None) -> tuple[str, float]:
    """FROM the same base: a venv and `pip install <package>`, nothing else."""
    tag = f"localhost/tf-cluster-bench-plain:{package}-{images.TF_VERSION}"
    with tempfile.TemporaryDirectory() as ctx:
        secret = "--mount=type=secret,id=pipca export PIP_CERT=/run/secrets/pipca && " if ca else ""
        (Path(ctx) / "Dockerfile").write_text(
            f"FROM {base}\nRUN {secret}python3 -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir "
            f"{PLAIN[package].format(v=images.TF_VERSION)}\nENV PATH=/opt/venv/bin:$PATH\n"
        )
        argv = _retag(build_argv(builder, images.Context("plain", Path(ctx), "", "plain"), ca), tag)
        seconds = build(argv, f"plain `pip install {package}` image")
    return tag, seconds


def _retag(argv: list[str], tag: str) -> list[str]:
    """build_argv's command with its `-t` tags replaced by one."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "-t":
            skip = True
            continue
        out.append(a)
    ctx = out[-1]
    return [*out[:-1], "-t", tag, ctx]


def rebuild_after_script_edit(builder: str, base: str, ca: Path | None) -> tuple[float, float]:
    """Seconds to rebuild the trainer image unchanged (every layer cached), and with one trainer
    script edited (the last layers only)."""
    tag = "localhost/tf-cluster-bench-rebuild:edited"
    with tempfile.TemporaryDirectory() as out:
        ctx = images.assemble("cpu", base=base, ca_secret=bool(ca), out=Path(out) / "ctx")
        unchanged = build(_retag(build_argv(builder, ctx, ca), tag), "trainer image, nothing changed")
        before = inspect(builder, tag, "Id")
        script = ctx.path / "trainers" / "mwms_fit.py"
        script.write_text(script.read_text() + f"\n# edited by bench_images.py at {time.time()}\n")
        edited = build(_retag(build_argv(builder, ctx, ca), tag), "trainer image, one trainer script edited")
        if inspect(builder, tag, "Id") == before:
            sys.exit("the edited context built the same image: the rebuild figure would measure nothing")
    subprocess.run([*exe(builder), "rmi", tag], capture_output=True)
    return unchanged, edited


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="localhost/tf-cluster-base:bookworm")
    args = p.parse_args()
    builder, ca = detect_builder(), default_ca_bundle()
    trainer = f"localhost/{images.DEFAULT_REPOSITORY}:{images.TF_VERSION}-cpu"
    sizes = {
        "trainer image (make image)": size(builder, trainer),
        "base (Debian bookworm, python3)": size(builder, args.base),
    }
    builds = {}
    for package in PLAIN:
        tag, seconds = plain_image(builder, args.base, package, ca)
        sizes[f"plain: pip install {package}"] = size(builder, tag)
        builds[f"plain: pip install {package}"] = seconds
    unchanged, edited = rebuild_after_script_edit(builder, args.base, ca)
    trainer_size = sizes["trainer image (make image)"]
    print("\nimage sizes (uncompressed, as the builder reports them)")
    print(table(["image", "GB", "vs trainer"], [[k, v / 1e9, f"{v / trainer_size:.2f}x"] for k, v in sizes.items()]))
    print("\nrebuild of the trainer image, seconds")
    print(table(["change", "seconds"], [["nothing", unchanged], ["one trainer script", edited]]))
    save("images", {"builder": builder, "sizes": sizes, "plain_build_seconds": builds,
                    "rebuild": {"nothing": unchanged, "one trainer script": edited}})  # fmt: skip


if __name__ == "__main__":
    main()
