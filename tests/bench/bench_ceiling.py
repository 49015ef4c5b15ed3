"""The ceiling: the most training tasks one release can have, found with real `helm template` runs
(Helm 4), for three ways of naming the release, and what the chart says one task past it. What
binds is TF_CONFIG: the program gets it as one environment string, which Linux caps at 131072
bytes (MAX_ARG_STRLEN), and every task's address is in it. The chart computes its size at render
and refuses a release past the cap, so the search is a bisection over the workers' replicas on
the chart's own verdict. Nothing is timed.

.venv/bin/python tests/bench/bench_ceiling.py
"""

from __future__ import annotations

import re

from bench_render import ENV_CAP
from benchlib import save, say, table

from tf_cluster import helm

# (what the row says, the release's name, --set values): the chart's default naming, a one-letter
# fullnameOverride (what docs/user-guide/values.md advises past ~1000 tasks), and that without the
# run's suffix in every address
CASES = (
    ("release `train`, defaults (fullname `train-tf-cluster`)", "train", ()),
    ("`fullnameOverride: t`", "train", ("fullnameOverride=t",)),
    ("`fullnameOverride: t`, `run.suffix: none`", "train", ("fullnameOverride=t", "run.suffix=none")),
)
HIGH = 1 << 14  # refused by every case (the bound the search starts from; checked)
REFUSAL = re.compile(r"TF_CONFIG for (\d+) training tasks would be (\d+) bytes")


def verdict(release: str, sets: tuple[str, ...], workers: int) -> str | None:
    """None when the release renders with `workers` workers, else the chart's refusal, which names
    the task count and TF_CONFIG's size in bytes (`bytes_of`)."""
    values = helm.Values.of([], [*sets, f"roles.worker.replicas={workers}"])
    r = helm.Helm("4").render(release, values)
    if r.returncode == 0:
        return None
    found = REFUSAL.search(r.stderr)
    if not found:
        raise SystemExit(f"{workers} workers were refused for another reason than TF_CONFIG's size:\n{r.stderr}")
    return helm.clean_helm_error(r.stderr).strip()


def bytes_of(refusal: str) -> int:
    """TF_CONFIG's size, as the chart's refusal states it."""
    found = REFUSAL.search(refusal)
    assert found is not None, refusal
    return int(found.group(2))


def ceiling(release: str, sets: tuple[str, ...]) -> tuple[int, str]:
    """The most workers that render, and the refusal of one more (kept from the bisection's upper
    bound, so no count is rendered twice)."""
    low, high = 1, HIGH
    refused = verdict(release, sets, high)
    if verdict(release, sets, low) is not None or refused is None:
        raise SystemExit(f"{sets}: the search needs 1 worker to render and {HIGH} to be refused")
    while high - low > 1:
        mid = (low + high) // 2
        answer = verdict(release, sets, mid)
        if answer is None:
            low = mid
        else:
            high, refused = mid, answer
        say(f"  {', '.join(sets) or 'defaults'}: renders {low}, refused {high}")
    return low, refused


def main() -> None:
    rows = []
    for label, release, sets in CASES:
        most, refused = ceiling(release, sets)
        size = bytes_of(refused)
        rows.append({"naming": label, "most tasks": most, "one more": size, "refusal": refused})
        say(f"{label}: {most} tasks render; {most + 1} are refused ({size} bytes)")
    body = [[r["naming"], r["most tasks"], r["one more"]] for r in rows]
    print(table(["naming", "most tasks", "TF_CONFIG bytes with one more"], body))
    save("ceiling", {"cap": ENV_CAP, "rows": rows})


if __name__ == "__main__":
    main()
