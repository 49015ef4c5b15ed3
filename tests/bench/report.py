"""Turn build/bench/*.json (left by the bench_*.py scripts) into docs/benchmarks.md with a PNG per
section (matplotlib), each figure beside its baseline as a ratio.

.venv/bin/python tests/bench/report.py
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from benchlib import OUT, fmt  # noqa: E402

from tf_cluster import ROOT  # noqa: E402

DOCS = ROOT / "docs"
GOAL_SECONDS = 5.0  # install to first step: within this of the floor


def load(name: str) -> dict | None:
    path = OUT / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def md_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def figure(name: str) -> str:
    plt.tight_layout()
    plt.savefig(DOCS / f"bench-{name}.png", dpi=110)
    plt.close()
    return f"![{name}](bench-{name}.png)"


def first_step(d: dict) -> list[str]:
    stages, med = d["stages"], d["median"]
    floor1 = next(k for k in med if k.startswith("floor: 1 "))
    out = [
        "## Install to first step, on the real node",
        f"Seconds from `helm install` (for the floor: from creating the pods) to each stage, median of {d['runs']} "
        "runs, the trainer image already on the node. A stage's time is the last pod's to reach it (the cluster is "
        "as ready as its last task); *strategy built* and *first step* are the leader's (chief, else worker 0). "
        "The floor runs the same program (`tests/bench/programs/timed_train.py`) directly in bare pods: no Job, "
        "no launcher, no TF_CONFIG, no cluster to join. Measured by `tests/bench/bench_node.py`.",
        "",
        md_table(["run", *stages], [[k, *(m[s] for s in stages)] for k, m in med.items()]),
        "",
    ]
    rows = []
    for shape in ("multiWorkerMirrored", "parameterServer"):
        if shape not in med:
            continue
        pods = 3 if shape == "parameterServer" else 2
        same = med.get(f"floor: {pods} bare pod(s)", {})
        t, f1, fn = med[shape]["first step"], med[floor1]["first step"], same.get("first step", float("nan"))
        verdict = "met" if t - f1 <= GOAL_SECONDS else "missed"
        rows.append([shape, t, f1, f"{t - f1:+.1f} s ({t / f1:.2f}x)", fn, f"{t - fn:+.1f} s ({t / fn:.2f}x)", verdict])
    for shape in ("multiWorkerMirrored", "parameterServer"):
        waits = [r.get("longest peer wait", 0.0) for r in d["all"].get(shape, [])]
        if waits:
            out.append(
                f"- {shape}: a task waited for a peer's name in {sum(w > 1 for w in waits)} of {len(waits)} runs "
                f"(longest wait per run: {', '.join(f'{w:.1f}' for w in waits)} s; see the cluster DNS section)."
            )
    for shape in ("multiWorkerMirrored", "parameterServer"):
        same = med.get(f"floor: {3 if shape == 'parameterServer' else 2} bare pod(s)")
        if shape in med and same:
            excess = stage_excess(stages, med[shape], same)
            out.append(
                f"- {shape}, where its time goes beyond the same pods' floor: "
                + ", ".join(f"{stage} {seconds:+.1f} s" for stage, seconds in excess if abs(seconds) >= 0.3)
                + "."
            )
    out += [
        "",
        f"Goal: the first step within {GOAL_SECONDS:.0f} s of the floor (one bare pod).",
        "",
        md_table(
            ["release", "first step s", "floor: 1 pod", "vs 1 pod", "floor: same pods", "vs same pods", "goal"], rows
        ),
        "",
    ]
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(med) + 1.5))
    for y, m in enumerate(med.values()):
        prev = 0.0
        for i, s in enumerate(stages):
            v = m[s]
            if v != v:  # a stage this run has not (no peers in a bare pod)
                continue
            ax.barh(y, max(v - prev, 0), left=prev, color=plt.cm.tab10(i), label=s if y == 0 else None)
            prev = max(prev, v)
    ax.set_yticks(range(len(med)), list(med))
    ax.invert_yaxis()
    ax.set_xlabel("seconds from helm install / pod create")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("Install to first step on one 2-core node (median)")
    return out + [figure("first-step"), ""]


def stage_excess(stages: list[str], run: dict, floor: dict) -> list[tuple[str, float]]:
    """How much longer each stage took (from the previous one) than in the floor; the floor has no
    peers to wait for, so its "peers resolved" is its "container running"."""
    floor = {**floor, "peers resolved": floor["container running"]}

    def spans(times: dict) -> list[float]:
        values = [times[s] for s in stages]
        return [b - a for a, b in zip([0.0, *values[:-1]], values, strict=True)]

    return [(s, a - b) for s, a, b in zip(stages, spans(run), spans(floor), strict=True)]


def threads(d: dict) -> list[str]:
    med, names = d["median"], d["threadings"]
    chart, default, sixteen = names
    rows = []
    for key, v in med.items():
        if key.endswith(", " + chart):
            where = key[: -len(", " + chart)]
            base, big = med[f"{where}, {default}"], med[f"{where}, {sixteen}"]
            rows.append([where, v, base, f"{v / base:.2f}x", big, f"{v / big:.2f}x"])
    out = [
        "## Threads from CPU limits",
        f"Steps/s of one task (Dense 1024x1024x2, batch 256, 100 steps after the first), median of {d['runs']}: "
        "the chart's `threads.fromCpuLimit: true` (TF_NUM_INTRAOP_THREADS and OMP_NUM_THREADS from the limit, "
        "inter-op max(2, that)) against TensorFlow's defaults (`false`: pools sized to the machine's cores, 2 "
        "here), and against the pools TensorFlow makes on a 16-core node (both set to 16: what a small limit "
        "on a big node gets without the chart). On the node the limit is the container's CFS quota; under "
        "run-local the whole run sits in a cgroup with the same quota. Measured by `tests/bench/bench_node.py`.",
        "",
        md_table(["where, CPU", f"{chart}", f"{default}", "ratio", f"{sixteen}", "ratio"], rows),
        "",
    ]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    x = range(len(rows))
    for j, (name, col) in enumerate(((chart, 1), (default, 2), (sixteen, 4))):
        ax.bar([i + (j - 1) * 0.27 for i in x], [r[col] for r in rows], 0.27, label=name)
    ax.set_xticks(list(x), [r[0] for r in rows], fontsize=7)
    ax.set_ylabel("steps/s")
    ax.legend(fontsize=8)
    ax.set_title("Steps/s under a CPU limit")
    return out + [figure("threads"), ""]


def cluster_dns(d: dict) -> list[str]:
    med, runs = d["median"], d["all"]
    keys = ("peers resolved", "first step")
    rows = []
    for name, m in med.items():
        waits = [r.get("longest peer wait", 0.0) for r in runs[name]]
        rows.append(
            [
                name,
                *(m[k] for k in keys),
                f"{sum(w > 1.5 for w in waits)} of {len(waits)}",
                ", ".join(f"{w:.1f}" for w in waits),
            ]
        )
    return [
        "## Cluster DNS caching and the first step",
        "A task that looks a peer up before the peer's pod has an address gets NXDOMAIN, and CoreDNS keeps "
        "that answer for the kubernetes plugin's `ttl` (5 s on this node, 30 s in the Corefile of Kubernetes' "
        "CoreDNS addon), however soon the address appears: the launcher's peer wait lasts until it expires. "
        "Each run asks the node's CoreDNS for every task's name (A and AAAA) just before `helm install`, "
        "to provoke that case, then measures ParameterServer install to first step (seconds, median of "
        f"{d['runs']}) under three Corefiles. A wait in the table is the longest any task of the run waited "
        "for its peers' names. Measured by `tests/bench/bench_node.py` (it rewrites the e2e node's Corefile; "
        "CoreDNS' reload plugin applies it).",
        "",
        md_table(["cluster DNS", *keys, "runs with a wait", "longest wait per run (s)"], rows),
        "",
        "A cluster removes the wait by not caching negative answers for its own domain, in the `cache` block "
        "of CoreDNS' Corefile: `cache 30 { disable denial cluster.local }` (the third row).",
        "",
    ]


def run_local(d: dict) -> list[str]:
    wall, first, runs = d["wall"], d["first_step"], d["all"]["wall"]
    modes = list(wall)
    hand = wall[modes[-1]]
    tasks = sorted({t for m in modes for t in first[m]})
    out = [
        "## run-local overhead",
        f"Wall seconds of `make demo` ({d['example']}), median of {d['runs']}: run-local as it runs by default "
        "(each task in its pod's namespaces), with `--no-isolation`, and the same processes started by hand "
        "with the same TF_CONFIG and env (no launcher, no run-local). Then the seconds from the command to each "
        "task's first step (the timed program, same shape). Measured by `tests/bench/bench_demo.py`.",
        "",
        md_table(
            ["mode", "wall s (median)", "vs by hand", "min", "max"],
            [[m, wall[m], f"{wall[m] / hand:.2f}x", min(runs[m]), max(runs[m])] for m in modes],
        ),
        "",
        "The demo's trainer ends with `model.save` on both workers (a collective under MultiWorkerMirrored); "
        "that save takes about 4, 10 or 16 s from run to run in every mode (TensorFlow's, seen with the "
        "processes started by hand too), so the wall times spread widely. The first-step times below (the "
        "timed program, no save) are the cleaner measure of what run-local adds.",
        "",
        md_table(
            ["mode", *(f"{t} first step s" for t in tasks)], [[m, *(first[m].get(t) for t in tasks)] for m in modes]
        ),
        "",
    ]
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.barh(range(len(modes)), [wall[m] for m in modes], color="tab:blue")
    ax.set_yticks(range(len(modes)), modes, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("wall seconds (median)")
    ax.set_title("make demo: run-local vs by hand")
    return out + [figure("run-local"), ""]


def scale(d: dict) -> list[str]:
    rows = d["rows"]
    cols = ["render s", "manifest bytes", "TF_CONFIG bytes", "of 128 KiB", "objects", "TFJob objects"]
    body = [
        [
            h,
            n,
            *(f"{m[c]:.1%}" if c == "of 128 KiB" else m[c] for c in cols),
            f"{m['TFJob objects'] / m['objects']:.1f}x",
        ]
        for h, r in rows.items()
        for n, m in r.items()
    ]
    out = [
        "## Scale",
        f"Render time (median of {d['runs']} `helm template` runs), manifest bytes, the largest TF_CONFIG (its "
        "share of the 131072 bytes one environment string may hold) and the API objects of a release with N "
        "workers. *objects*: what the chart renders (the `helm test` Pod excluded) + one Pod per task + one "
        "EndpointSlice per 100 tasks (its single headless Service); *TFJob objects*: the TFJob + a Pod, a Service "
        "and its EndpointSlice per replica. Measured by `tests/bench/bench_render.py`.",
        "",
        md_table(["helm", "tasks", *cols, "TFJob / chart"], body),
        "",
    ]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for h, r in rows.items():
        n = [int(k) for k in r]
        a1.plot(n, [m["render s"] for m in r.values()], marker="o", label=h)
    first = next(iter(rows.values()))
    n = [int(k) for k in first]
    a2.plot(n, [m["objects"] for m in first.values()], marker="o", label="tf-cluster")
    a2.plot(n, [m["TFJob objects"] for m in first.values()], marker="s", label="TFJob")
    for a, title, yl in ((a1, "render time", "seconds"), (a2, "API objects", "objects")):
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel("tasks")
        a.set_ylabel(yl)
        a.set_title(title)
        a.legend()
    return out + [figure("scale"), ""]


def ceiling(d: dict) -> list[str]:
    body = [[r["naming"], r["most tasks"], r["one more"]] for r in d["rows"]]
    return [
        "## The ceiling",
        "The most training tasks one release can have: TF_CONFIG reaches the program as one environment "
        f"string, which Linux caps at {d['cap']} bytes (MAX_ARG_STRLEN), and it holds every task's address "
        "(`<fullname>-<role>-<run>-<index>.<fullname>:<port>`), so the name is what sets the ceiling. The chart "
        "computes the size at render and refuses a release past it; found by bisection over the workers with "
        "`helm template` (Helm 4). Measured by `tests/bench/bench_ceiling.py`.",
        "",
        md_table(["naming", "most tasks", "TF_CONFIG bytes with one more"], body),
        "",
        f"One task past the last row, `helm template` says: `{d['rows'][-1]['refusal']}`",
        "",
    ]


def image_sizes(d: dict) -> list[str]:
    sizes = d["sizes"]
    trainer = sizes["trainer image (make image)"]
    out = [
        "## Images",
        f"Sizes as {d['builder']} reports them (uncompressed), and the trainer image's rebuild time. The plain "
        "images are what a user would build on the same base without tf-cluster. Measured by "
        "`tests/bench/bench_images.py`.",
        "",
        md_table(["image", "GB", "vs trainer"], [[k, v / 1e9, f"{v / trainer:.2f}x"] for k, v in sizes.items()]),
        "",
        md_table(["trainer image rebuild after", "seconds"], [[k, v] for k, v in d["rebuild"].items()]),
        "",
    ]
    fig, ax = plt.subplots(figsize=(7, 2.6))
    ax.barh(range(len(sizes)), [v / 1e9 for v in sizes.values()], color="tab:green")
    ax.set_yticks(range(len(sizes)), list(sizes), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("GB")
    ax.set_title("Image sizes")
    return out + [figure("images"), ""]


def starts_under_addon_dns(d: dict) -> list[str]:
    """Starts under the CoreDNS addon's Corefile, this launcher against an earlier one (when measured:
    first-step-addon-dns-launcher-<rev>.json)."""
    befores = sorted(OUT.glob("first-step-addon-dns-launcher-*.json"))
    rows = []
    for label, data in [
        *((f"launcher of {b.stem.rsplit('-', 1)[-1]} (before)", json.loads(b.read_text())) for b in befores),
        ("this launcher", d),
    ]:
        for shape, w in data.get("within 5 s of floor", {}).items():
            starts = w["starts"]
            rows.append(
                [
                    label,
                    shape,
                    w["floor"],
                    min(starts),
                    sorted(starts)[len(starts) // 2],
                    max(starts),
                    f"{w['within 5 s']} of {len(starts)}",
                ]
            )
    return [
        "## Starts under the CoreDNS addon's Corefile",
        "Install to first step (seconds) with the e2e node's CoreDNS running the Corefile of Kubernetes' CoreDNS "
        "addon (`kubernetes ... ttl 30`, `cache 30`: negative answers cached 30 s), nothing asked before the "
        "install: a task's own early lookups are what can leave an NXDOMAIN in the cache. The floor is the "
        "same program in as many bare pods (median). The launcher waits for the peers' pods through the API "
        "and looks a name up only once its pod has an IP. Measured by `tests/bench/bench_node.py --only "
        "first-step --corefile addon` (`--launcher-from REV` for the earlier launcher).",
        "",
        md_table(["launcher", "release", "floor s", "min s", "median s", "max s", "within 5 s of the floor"], rows),
        "",
        "The earlier launcher looked every TF_CONFIG address up from its start, about once a second: a name asked "
        "for before its pod had an address was cached as NXDOMAIN for 30 s, and the start waited that out. Each "
        "start here is a new run (new names): the same names again within 30 s could find the previous run's "
        "teardown lookups still cached, which no launcher of the new run can prevent.",
        "",
    ]


def kb(n: float | None) -> float | str:
    """Bytes as KB (1024) to one decimal, "-" when not measured (a start refused at render, or figures
    saved before the pod's size was read from the API server and etcd)."""
    return "-" if n is None else round(n / 1024, 1)


def simulated(d: dict) -> list[str]:
    """Thousands of tasks on the simulated cluster (bench_sim.py)."""
    refuse_unpublishable(d)
    # each start against the floor of its kind (bare pods, in one gang for a gang's start)
    floors = {(f["shape"], f["tasks"], f.get("gang", False)): f["marks"].get("running") for f in d.get("floors", [])}
    starts = sorted(
        d["starts"], key=lambda s: (s["tasks"], s.get("shape", "mwms"), s["gang"], s.get("chart", "this") == "this")
    )
    rows = []
    for s in starts:
        m = s["marks"]
        rate = s["tasks"] / m["created"] if m.get("created") else float("nan")
        rows.append(
            [
                {"mwms": "MultiWorkerMirrored", "ps": "ParameterServer"}.get(s.get("shape", "mwms")),
                s["tasks"],
                "on" if s["gang"] else "off",
                "once per run" if s.get("chart", "this") == "this" else f"in every pod ({s['chart']})",
                s["helm_install_s"],
                m.get("created", "-"),
                m.get("bound", "-"),
                m.get("running", "stopped: " + str(m.get("stopped"))),
                floors.get((s.get("shape", "mwms"), s["tasks"], s["gang"]), "-"),
                times_floor(m.get("running"), floors.get((s.get("shape", "mwms"), s["tasks"], s["gang"]))),
                round(rate, 1),
                "-" if s["requests_total"] is None else s["requests_total"],
                "-" if s["endpointslices"] is None else s["endpointslices"],
                kb(s.get("pod_api_bytes")),
                kb(s.get("pod_etcd_bytes")),
                "-" if s["etcd_db_bytes"] is None else round(s["etcd_db_bytes"] / 1e6),
                s.get("nodes_not_ready", "-"),
            ]
        )
    out = [
        "## Thousands of tasks on a simulated cluster",
        f"A MultiWorkerMirrored release of N workers and a ParameterServer one of N tasks (chief, "
        "2 ps, N-3 workers), gang off and on, each on a new cluster: the real etcd, kube-apiserver, "
        f"kube-controller-manager and kube-scheduler 1.37 (gang scheduling on, as the node harness has it), "
        f"{d['nodes']} kwok nodes of {d['node_pods']} pods each (kwok 0.8.0: a pod bound to one turns Running "
        "with an IP), the real CoreDNS with the addon's Corefile; at some sizes also with the chart of "
        f"{d.get('chart_before', 'an earlier revision')}, whose pods each carried the whole TF_CONFIG "
        "(*in every pod*). Seconds from `helm install` until every pod "
        "was created, bound to a node and Running; the API requests the start caused (apiserver_request_total, "
        "less nodes and leases: kwok's heartbeats); one pod's size, as the API server's JSON of it (a GET) "
        "and as etcd stores it (its protobuf value), with 20 KB the goal at 4096 tasks; etcd's database. "
        "The controller "
        "manager and scheduler keep their default client rate limits. *Floor*: on a new cluster of the same kind, "
        "the same release's pods as bare pods (no Job), created at kube-controller-manager's default client rate "
        f"({d['windows']['floor_qps']} a second, bursts of {d['windows']['floor_burst']}: the rate its Job "
        "controller creates pods at) from 16 threads, and for a gang's start in the same PodGroup (the scheduler "
        "binds none until all exist); *Running / floor*: the start's time until all pods ran, "
        "as a multiple of that. Measured by `tests/bench/bench_sim.py` (`make bench-sim`).",
        "",
        md_table(
            [
                "release",
                "tasks",
                "gang",
                "TF_CONFIG's cluster",
                "helm s",
                "all created s",
                "all bound s",
                "all Running s",
                "floor: bare pods all Running s",
                "Running / floor",
                "pods created /s",
                "API requests",
                "EndpointSlices",
                "pod KB (API JSON)",
                "pod KB in etcd",
                "etcd MB",
                "nodes not Ready",
            ],
            rows,
        ),
        "",
    ]
    sizes = sorted({s["tasks"] for s in starts})
    fig, axes = plt.subplots(1, len(sizes), figsize=(4 * len(sizes), 3.2))
    for ax, n in zip(axes if len(sizes) > 1 else [axes], sizes, strict=True):
        for s in (
            x
            for x in starts
            if x["tasks"] == n and x.get("shape", "mwms") == "mwms" and x.get("chart", "this") == "this"
        ):
            t = [c[0] for c in s["curve"]]
            style = "-" if s["gang"] else "--"
            label = "gang" if s["gang"] else "no gang"
            ax.plot(t, [c[1] for c in s["curve"]], style, color="tab:gray", label=f"created ({label})")
            ax.plot(t, [c[2] for c in s["curve"]], style, color="tab:blue", label=f"bound ({label})")
        ax.set_title(f"{n} tasks")
        ax.set_xlabel("s after helm install")
    (axes[0] if len(sizes) > 1 else axes).set_ylabel("pods")
    (axes[-1] if len(sizes) > 1 else axes).legend(fontsize=7)
    out += [
        "MultiWorkerMirrored pods created and bound over time, gang on and off:",
        "",
        figure("simulated-starts"),
        "",
    ]
    out += launcher_costs(d)
    return out


def refuse_unpublishable(d: dict) -> None:
    """A smoke run's figures (bench_sim.py --smoke: a shorter steady window), figures measured before
    the windows were fixed, and a benchmark some of whose parts are not measured yet are no table's."""
    if d.get("smoke"):
        raise SystemExit("these simulated-cluster figures are a smoke run's (bench_sim.py --smoke): not published")
    if d.get("missing"):
        raise SystemExit(
            f"{len(d['missing'])} part(s) of the simulated-cluster benchmark are not measured with today's code "
            f"({', '.join(d['missing'])}): run `make bench-sim` (MINUTES=... for a sitting) until none is left"
        )
    if "windows" not in d or any("steady" not in r for r in d["launchers"]):
        raise SystemExit("these simulated-cluster figures predate the fixed windows: run bench_sim.py again")
    if any("beside" not in r or "cpu_idle_pct" not in r for r in d["launchers"]):
        raise SystemExit("these launchers' figures do not say what was measured beside them: run bench_sim.py again")


def times_floor(seconds: float | None, floor: float | None) -> str:
    return f"{seconds / floor:.2f}x" if seconds and floor else "-"


def per_minute(by_verb: dict[str, int], tasks: int, seconds: float) -> str:
    """Requests by verb, a task a minute ("watch pods 1.02, get jobs 0.10")."""
    return ", ".join(f"{k} {v / tasks / (seconds / 60):.2f}" for k, v in by_verb.items()) or "none"


def launcher_rows(d: dict) -> tuple[list[list], list[list]]:
    """The launchers' rows: the start and the fencers' first LIST; the steady window and the fault."""
    early, late = [], []
    for r in sorted(d["launchers"], key=lambda r: (r["size"], r["shape"], not r["launcher"].startswith("before"))):
        k, listed, steady, fault = r["tasks"], r["list"], r["steady"], r["fault"]
        who = [r["shape"], r["size"], r["launcher"], k]
        early.append(
            who
            + [
                r["start_s"],
                r["api_start_per_task"],
                r["dns_start_per_task"],
                round(r["list_bytes_start"] / 1e6 / k, 2),
            ]
            + [listed["seconds"], listed["requests"], round(listed["bytes"] / 1e6, 1)]
            + ["-" if listed["done_s"] is None else listed["done_s"], "yes" if listed["completed"] else "no"]
            + [max(r.get("peak_mb") or [float("nan")]), max(r["peers"]) if r.get("peers") else "-"]
            + [r["cpu_idle_pct"][0]]
        )
        late.append(
            who
            + [steady["per_task_min"], per_minute(steady["by_verb"], k, steady["seconds"]), steady["renewals"]]
            + [steady["dns_per_task_min"], fault["fencer_requests_per_task"], fault["follower_requests_per_task"]]
            + [fault.get("node_not_ready_s", "-"), fault.get("failed_s", "no"), fault.get("replaced_s", "no")]
            + [len(r["beside"]), r["cpu_idle_pct"][2]]
        )
    return early, late


def launcher_costs(d: dict) -> list[str]:
    w = d["windows"]
    early, late = launcher_rows(d)
    who = ["release", "tasks N", "launcher", "sampled"]
    return [
        "### What the launchers ask of the API server and DNS",
        "Each launcher's run in a new cluster of its own, its release (gang off) started there first, several "
        "such runs at once, each cluster started once the one before had passed its window (b) (*beside*: how "
        "many others ran during some of its windows; *CPU idle*: the machine's idle share in window (a) and in "
        "the steady window; their figures are requests, the start's seconds aside), after the starts above, "
        f"which ran alone. The real launcher of a sample of the release's tasks (up to "
        f"{max(r['tasks'] for r in d['launchers'])}: the leading task, each ps, then workers by index), each with "
        "its pod's environment and a service-account token bound to its pod (as the kubelet projects one), "
        "`sleep` as its program, resolving through the simulated cluster's CoreDNS. API requests: the API "
        "server's audit log of the release's service account, each request's task named by its token; DNS: "
        "CoreDNS' coredns_dns_requests_total. Four windows one after the other, so that every request from the "
        "launchers' start to the fault's end is in one, fixed in the script before any run: "
        f"**(a) start**, from the launchers' start until each has started its program (at most "
        f"{w['start_limit_s']} s); **(b) the fencers' first LIST**, from there until every fencer's first LIST "
        "of the release's pods (in the audit log) was answered whole, or at most "
        f"{w['list_limit_s']} s (*LIST done at*: seconds after the launchers began; a LIST done within the start "
        f"counts in it); **(c) steady**, the next {w['steady_s'] / 60:.0f} minutes, counted whole: a launcher's "
        "watch lasts 10-20 minutes (the launcher before: 5-10; the self-fence's watch, so while its pod is Ready "
        "and its watch brings the API server's bookmarks; the release's first fencer writes its pulse every "
        "45 s, counted among the sample's requests, so at 512 and 4096 tasks more than the release's share), "
        "and *watch renewals* are the watches in the window after each task's first of "
        f"the same resource; **(d) a node lost** for {w['fault_s']} s: a node holding a sampled task's pod (not "
        "a fencer's) stops renewing its Lease and answering for its pods (kwok lets it go), and that task's "
        "launcher dies with it; the requests of the fencers and of the other tasks, each, and seconds after the "
        "loss until the node was NotReady, its pod marked Failed, and its Job's replacement Running. "
        f"*before*: the launcher of {d['before']} (every address looked up, the leading Job polled every "
        "`pollSeconds`, every task fencing with a LIST every `fenceCheckSeconds`); *after*: this launcher; both "
        "in the same windows. TensorFlow's own lookups (none here) come on top.",
        "",
        md_table(
            who
            + ["(a) start s", "API req/task", "DNS queries/task", "MB listed/task"]
            + ["(b) window s", "API requests", "MB listed", "LIST done at s", "LIST whole"]
            + ["peak MB (largest)", "most peers one task waited for", "CPU idle % (a)"],
            early,
        ),
        "",
        md_table(
            who
            + ["(c) API req/task/min", "by verb /task/min", "watch renewals", "DNS queries/task/min"]
            + ["(d) API req/fencer", "API req/other task", "node NotReady s", "pod Failed s", "replacement Running s"]
            + ["beside", "CPU idle % (c)"],
            late,
        ),
        "",
        "What limits a start here: pods are created at ~20 a second, kube-controller-manager's default client "
        "rate limit (`--kube-api-qps` 20) pacing the Job controller; with the gang no pod is bound before all "
        "exist, then the scheduler binds at its own client limit (50 requests a second, a binding and an event "
        "a pod). When every pod carried its TF_CONFIG (*in every pod*) etcd held O(N²) bytes: a run that says "
        "*stopped* filled etcd's default 2 GB quota, after which nothing in the cluster could write; the chart now "
        "stores the cluster once per run (a ConfigMap each pod composes its TF_CONFIG from). *before (fence off)*: "
        "the earlier launcher LISTed all the release's pods from every task every 10 s, ~600 MB each at 4096 "
        "tasks, more than this machine's API server could serve to 32 tasks, so it ran without its fence there.",
        "",
    ]


def sim_events(d: dict) -> list[str]:
    """The launchers' Kubernetes Events during a start on the simulated cluster (bench_sim_events.py)."""
    rows, over = [], []
    for r in sorted(d["runs"], key=lambda r: (r["tasks"], r["shape"])):
        k = r["sampled"]
        moments = sum(v["moments"] for v in r["events_by_reason"].values())
        # the whole release at the measured rate per task: every task waits as the sampled ones did
        whole = r["event_requests_per_task"] * r["tasks"] / r["all_running_s"]
        rows.append(
            [
                {"mwms": "MultiWorkerMirrored", "ps": "ParameterServer", "custom": "custom"}[r["shape"]],
                r["tasks"],
                k,
                r["period_s"],
                r["all_running_s"],
                max(r["waits"] or [0.0]),
                r["event_requests_per_task"],
                r["event_requests_bound_per_task"],
                r["event_objects_per_task"],
                round(moments / k, 2),
                round(r["event_bytes_per_task"] / 1024, 2),
                round(whole, 1),
                round(100 * r["event_requests_per_task"] * r["tasks"] / r["release_requests_total"], 1),
                ", ".join(f"{reason} {v['objects']}" for reason, v in sorted(r["events_by_reason"].items())) or "-",
            ]
        )
        if r["event_requests"] > r["event_requests_bound"]:
            over.append(f"{r['shape']} at {r['tasks']} tasks")
    return [
        "## Events at thousands of tasks",
        "Each task records its lifecycle moments as Kubernetes Events on its own pod (waiting for peers, a "
        "fenced peer, stopped with its leader, a restarted coordinator): one Event per reason, its count and "
        f"message updated in place at most once per *update period*: {d['every_s']:.0f} s, or N/"
        f"{d['release_rate']:.0f} s in a release of N tasks past {d['every_s'] * d['release_rate']:.0f}, "
        f"so that all its tasks together update at most {d['release_rate']:.0f} Events a second. The moment every "
        "task meets is the "
        "start's peer wait, so each release starts here gang off (the waits are longest) on a new simulated "
        f"cluster of {d['nodes']} kwok nodes, and the real launcher of the first {d['sample']} pods to turn Running "
        "(its agent beside it, as in the pod) starts as soon as its pod is Running. The window, fixed in the script: "
        "from the first sampled launcher's start until every pod is Running, every sampled program has started, "
        f"and {d['tail_s']:.0f} s more. *Event requests*: `create` and `patch` of events by the release's service "
        "account in that window (the audit log); *bound*: one `create` and at most one `patch` per "
        "update period of each sampled task's wait, summed; *moments*: the Events' count fields; *whole "
        "release*: the measured requests per task for every task, spread over the start (an upper bound: the "
        "first pods to run wait the longest); *of the start's requests*: the same as a share of the API requests "
        "the start caused. Which tasks wait: under MultiWorkerMirrored each task waits for the leader alone (then "
        "TensorFlow's own start-up barrier holds them), under ParameterServer the chief waits for every task and "
        "the others for none, under `custom` every task waits for every peer (the most Events a start can "
        "cause). Measured by "
        "`tests/bench/bench_sim_events.py`.",
        "",
        md_table(
            [
                "release",
                "tasks",
                "sampled",
                "update period s",
                "all Running s",
                "longest wait s",
                "Event requests/task",
                "bound/task",
                "Event objects/task",
                "moments/task",
                "KB of Events/task",
                "whole release: Event requests/s",
                "% of the start's requests",
                "Events by reason",
            ],
            rows,
        ),
        "",
        ("Every release stayed within the bound." if not over else "Over the bound: " + "; ".join(over) + "."),
        "",
    ]


# written when measured, not required (sim: `make bench-sim`, kwok and the simulated cluster)
OPTIONAL = (("first-step-addon-dns", starts_under_addon_dns), ("sim", simulated), ("sim-events", sim_events))

SECTIONS = (
    ("first-step", first_step),
    ("dns", cluster_dns),
    ("threads", threads),
    ("run-local", run_local),
    ("scale", scale),
    ("ceiling", ceiling),
    ("images", image_sizes),
)


def only(name: str) -> None:
    """Rewrite one section of docs/benchmarks.md from its JSON, the others as they are (a rerun of one
    script: `report.py --only sim`)."""
    sections = dict(SECTIONS + OPTIONAL)
    if name not in sections:
        sys.exit(f"report.py --only {name}: no such section of docs/benchmarks.md; one of: {', '.join(sections)}")
    data = load(name)
    if data is None:
        sys.exit(f"no figures for {name}: build/bench/{name}.json (run its script first)")
    section = sections[name](data)
    section.insert(len(section) - 1, f"_Measured {data['measured']}._")  # the section ends with ""
    page = DOCS / "benchmarks.md"
    text = page.read_text() if page.is_file() else "# Benchmarks\n"
    heading = section[0]
    start = text.find(heading + "\n")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + "\n".join(section)
    else:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + "\n".join(section) + ("\n" + text[end + 1 :] if end >= 0 else "")
    page.write_text(text)
    print(f"wrote the {name} section of {page}")


def main() -> None:
    if sys.argv[1:2] == ["--only"] and len(sys.argv) > 2:
        return only(sys.argv[2])
    DOCS.mkdir(exist_ok=True)
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (tests/bench/report.py) from the figures its scripts measured on one machine: "
        "2 cores, 24 GiB, no GPU; the real node is the e2e node (`make e2e-up`: kube-* 1.37 from the Go modules, "
        "containerd, CoreDNS) on the same machine. Each section names its script; rerun one with "
        "`.venv/bin/python tests/bench/<script>` and then `tests/bench/report.py`.",
        "",
    ]
    missing = []
    for name, section in SECTIONS:
        data = load(name)
        if data is None:
            missing.append(name)
            continue
        lines += section(data)
        lines.insert(len(lines) - 1, f"_Measured {data['measured']}._")
        lines.insert(len(lines) - 1, "")
    for name, section in OPTIONAL:
        data = load(name)
        if data is not None:
            lines += section(data)
            lines.insert(len(lines) - 1, f"_Measured {data['measured']}._")
            lines.insert(len(lines) - 1, "")
    (DOCS / "benchmarks.md").write_text("\n".join(lines))
    print(f"wrote {DOCS / 'benchmarks.md'}" + (f" (no figures yet for: {', '.join(missing)})" if missing else ""))
    if missing:
        sys.exit(1)


if __name__ == "__main__":
    main()
