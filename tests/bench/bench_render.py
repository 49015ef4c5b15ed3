"""Print render time and TF_CONFIG size for growing clusters (Helm 4 and Helm 3).

make bench
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import yaml

from tf_cluster import helm


def main() -> None:
    print(f"{'helm':>4} {'workers':>8} {'suffix':>6} {'render s':>9} {'TF_CONFIG bytes':>16} {'of 131072':>9}")
    for major in ("4", "3"):
        for workers in (16, 512, 4096):
            for suffix in ("none", "auto"):
                values = {
                    "fullnameOverride": "t",
                    "run": {"suffix": suffix},
                    "roles": {"worker": {"replicas": workers}},
                }
                with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                    yaml.safe_dump(values, f)
                t0 = time.perf_counter()
                docs = helm.parse(helm.template([f.name], helm=major))
                elapsed = time.perf_counter() - t0
                Path(f.name).unlink()
                job = next(d for d in docs if d["kind"] == "Job")
                tf_config = next(
                    e["value"]
                    for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
                    if e["name"] == "TF_CONFIG"
                ).replace("$(TF_TASK_INDEX)", str(workers - 1))
                size = len("TF_CONFIG=" + tf_config) + 1
                print(f"{major:>4} {workers:>8} {suffix:>6} {elapsed:9.2f} {size:16d} {size / 131072:9.0%}")


if __name__ == "__main__":
    main()
