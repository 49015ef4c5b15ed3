"""Scale: for 1 to 4096 tasks, the render time, manifest bytes, the largest TF_CONFIG (and its share
of the 128 KiB a single environment string may hold) and the API objects a release makes, with
Helm 4 and Helm 3; beside it what TFJob makes for the same tasks.

Objects the chart makes: what it renders (its one headless Service, Jobs, ConfigMap, RBAC,
NetworkPolicy; the `helm test` Pod excluded) + one Pod per task (the Job controller) + the headless
Service's EndpointSlices (one per 100 endpoints). TFJob (training-operator v1.9): the TFJob + one Pod
and one Service per replica + one EndpointSlice per Service.

.venv/bin/python tests/bench/bench_render.py [--sizes 1,16,256,1024,4096] [--runs N]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import yaml
from benchlib import median, save, say, table

from tf_cluster import helm, manifests

ENV_CAP = 131072  # MAX_ARG_STRLEN: one "NAME=value" string of a process's environment


def render(tasks: int, major: str) -> tuple[float, str]:
    values = {"fullnameOverride": "t", "roles": {"worker": {"replicas": tasks}}}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(values, f)
    try:
        t0 = time.perf_counter()
        text = helm.template([f.name], helm=major)
        return time.perf_counter() - t0, text
    finally:
        Path(f.name).unlink()


def largest_tf_config(docs: list[dict]) -> int:
    """Bytes of the longest TF_CONFIG env string (`TF_CONFIG=` + value + NUL) as the kubelet composes it (the
    run's cluster ConfigMap, the highest index)."""
    largest = 0
    maps = manifests.config_maps(docs)
    for job in (d for d in docs if d["kind"] == "Job"):
        last = job["spec"].get("completions", 1) - 1
        for c in job["spec"]["template"]["spec"]["containers"]:
            env = manifests.resolve_env(c, index=last, namespace="default", node_cpus=1, config_maps=maps)
            if "TF_CONFIG" in env:
                largest = max(largest, len("TF_CONFIG=" + env["TF_CONFIG"]) + 1)
    return largest


def measure(tasks: int, major: str, runs: int) -> dict:
    times, text = [], ""
    for _ in range(runs):
        seconds, text = render(tasks, major)
        times.append(seconds)
    docs = helm.parse(text)
    rendered = [d for d in docs if "helm.sh/hook" not in (d["metadata"].get("annotations") or {})]
    tf_config = largest_tf_config(docs)
    return {
        "render s": median(times),
        "manifest bytes": len(text.encode()),
        "TF_CONFIG bytes": tf_config,
        "of 128 KiB": tf_config / ENV_CAP,
        "rendered": len(rendered),
        "objects": len(rendered) + tasks + math.ceil(tasks / 100),
        "TFJob objects": 1 + 3 * tasks,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1,16,256,1024,4096")
    p.add_argument("--runs", type=int, default=3, help="renders per size (the median is kept)")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows: dict[str, dict[str, dict]] = {}
    for major in ("4", "3"):
        for n in sizes:
            rows.setdefault(f"helm {major}", {})[str(n)] = measure(n, major, args.runs)
            say(f"helm {major}, {n} task(s): {rows[f'helm {major}'][str(n)]['render s']:.2f}s")
    cols = ["render s", "manifest bytes", "TF_CONFIG bytes", "of 128 KiB", "objects", "TFJob objects"]
    print(f"\nrender and objects by task count (median of {args.runs} renders)")
    body = [
        [h, n, *(m[c] if c != "of 128 KiB" else f"{m[c]:.1%}" for c in cols)]
        for h, r in rows.items()
        for n, m in r.items()
    ]
    print(table(["helm", "tasks", *cols], body))
    save("scale", {"runs": args.runs, "sizes": sizes, "rows": rows})


if __name__ == "__main__":
    main()
