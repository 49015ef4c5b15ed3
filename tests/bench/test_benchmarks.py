"""The benchmark scripts' own logic (tests/bench): reading the timed program's marks and the
kubelet's log timestamps, the largest TF_CONFIG of a real render, and the report's verdicts.
The figures themselves are measured by `make bench`, never asserted here."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tf_cluster import ROOT, helm, kube

sys.path.insert(0, str(ROOT / "tests" / "bench"))
import bench_ceiling  # noqa: E402
import bench_render  # noqa: E402
import benchlib  # noqa: E402
import reaped  # noqa: E402
import report  # noqa: E402
import sim_audit  # noqa: E402
import sim_parts  # noqa: E402


def test_marks_are_read_from_pod_logs_with_kubelet_timestamps_and_the_last_of_each_wins():
    text = (
        '2026-11-24T02:57:30.123456789Z BENCH {"mark": "start", "t": 10.0}\n'
        "2026-11-24T02:57:31.000000000Z [launcher worker-0] all 2 peer(s) resolve after 0.3s\n"
        'BENCH {"mark": "start", "t": 20.0}\n'
        "BENCH {not json\n"
        'BENCH {"mark": "done", "t": 25.0, "steps_per_s": 41.5}\n'
    )
    found = benchlib.marks(text)
    assert found["start"]["t"] == 20.0 and found["done"]["steps_per_s"] == 41.5
    assert set(found) == {"start", "done"}
    stamp = kube.kubelet_time("2026-11-24T02:57:30.123456789Z")
    assert stamp == pytest.approx(1795489050.123456789, abs=1e-6)


def test_the_largest_tf_config_is_the_last_index_of_a_real_render():
    docs = helm.parse(helm.Helm("4").template("t", helm.Values.of([], set=["roles.worker.replicas=12"])))
    job = next(d for d in docs if d["kind"] == "Job")
    spec = next(
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-tf-config-" + job["metadata"]["name"][-6:])
    )
    cluster = spec["data"]["TF_CLUSTER_SPEC"]  # the run's environment, which the pods take by envFrom
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    value = env["TF_CONFIG"]["value"].replace("$(TF_TASK_INDEX)", "11").replace("$(TF_CLUSTER_SPEC)", cluster)
    assert len(json.loads(value)["cluster"]["worker"]) == 12
    assert json.loads(value)["task"] == {"type": "worker", "index": 11}
    assert bench_render.largest_tf_config(docs) == len("TF_CONFIG=" + value) + 1


def first_step_data(mwms: float, ps: float, floor1: float) -> dict:
    stages = ["container running", "peers resolved", "first step"]
    nan = float("nan")
    med = {
        "multiWorkerMirrored": {"container running": 1.0, "peers resolved": 1.2, "first step": mwms},
        "parameterServer": {"container running": 1.0, "peers resolved": 6.0, "first step": ps},
        "floor: 1 bare pod(s)": {"container running": 1.0, "peers resolved": nan, "first step": floor1},
        "floor: 2 bare pod(s)": {"container running": 1.0, "peers resolved": nan, "first step": floor1 + 1},
        "floor: 3 bare pod(s)": {"container running": 1.0, "peers resolved": nan, "first step": floor1 + 2},
    }
    return {"runs": 3, "stages": stages, "median": med, "all": {}}


def test_the_ceiling_is_the_last_count_the_chart_renders_and_the_next_is_its_refusal(monkeypatch):
    """bench_ceiling's bisection ends on the pair (renders, refused) the chart's verdict gives; the
    verdict is the chart's own refusal, read from a real `helm template` one task past a count."""
    real = bench_ceiling.verdict("train", ("fullnameOverride=t",), 8192)
    assert real is not None and real.startswith("TF_CONFIG for 8192 training tasks would be "), real
    assert bench_ceiling.verdict("train", ("fullnameOverride=t",), 2) is None
    asked = []

    def chart(release, sets, workers):
        asked.append(workers)
        return None if workers <= 3000 else f"TF_CONFIG for {workers} training tasks would be {workers * 44} bytes"

    monkeypatch.setattr(bench_ceiling, "verdict", chart)
    most, refused = bench_ceiling.ceiling("train", ())
    assert most == 3000 and refused.startswith("TF_CONFIG for 3001 training tasks")
    assert len(asked) <= 2 + 14  # the two bounds and a bisection of 2**14; no count asked twice
    assert len(asked) == len(set(asked))


def test_the_report_says_met_or_missed_against_the_five_second_goal(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "DOCS", tmp_path)
    lines = "\n".join(report.first_step(first_step_data(mwms=9.0, ps=12.0, floor1=5.0)))
    rows = {line.split(" | ")[0].strip("| "): line for line in lines.splitlines() if line.startswith("| ")}
    assert rows["multiWorkerMirrored"].endswith("| met |") and "+4.0 s (1.80x)" in rows["multiWorkerMirrored"]
    assert rows["parameterServer"].endswith("| missed |") and "+7.0 s (2.40x)" in rows["parameterServer"]
    # the peer wait is the stage that sets ParameterServer apart from three bare pods
    assert "- parameterServer, where its time goes beyond the same pods' floor: peers resolved +5.0 s." in lines
    assert (tmp_path / "bench-first-step.png").stat().st_size > 1000


def test_the_report_names_what_it_has_no_figures_for(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report, "DOCS", tmp_path)
    monkeypatch.setattr(report, "OUT", tmp_path / "none")
    with pytest.raises(SystemExit):
        report.main()
    assert "no figures yet for: first-step, dns, threads, run-local, scale, ceiling, images" in capsys.readouterr().out
    assert (tmp_path / "benchmarks.md").read_text().startswith("# Benchmarks")


def test_every_benchmark_writes_the_json_the_report_reads():
    """Each section of report.py has a script that saves it (a renamed file would leave a hole)."""
    saved = set()
    for script in (ROOT / "tests" / "bench").glob("bench_*.py"):
        text = script.read_text()
        saved |= {name for name, _ in report.SECTIONS if re.search(rf'save\(\s*"{name}"', text)}
    assert saved == {name for name, _ in report.SECTIONS}
    assert Path(benchlib.PROGRAM).is_file()


def test_the_simulated_cluster_section_reads_what_bench_sim_saves(tmp_path, monkeypatch):
    """report.simulated turns bench_sim.py's JSON into its tables and plot (figures made up here): every
    window stated, the starts against their floor, the fencers' LIST, the steady window's renewals, the fault."""
    monkeypatch.setattr(report, "DOCS", tmp_path)

    def start(n: int, gang: bool, chart: str = "this") -> dict:
        marks = {"created": n / 20, "bound": n / 15, "running": n / 15}
        return {"tasks": n, "gang": gang, "chart": chart, "helm_install_s": 0.6, "marks": marks,
                "requests_total": 6 * n,
                "curve": [(0.0, 0, 0, 0), (n / 15, n, n, n)], "endpointslices": -(-n // 100),
                "pod_api_bytes": 40960, "pod_etcd_bytes": 30720, "etcd_db_bytes": 89e6,
                "nodes_not_ready": 0}  # fmt: skip

    def launchers(label: str, api: float, dns: float) -> dict:
        return {"shape": "ps", "size": 512, "launcher": label, "tasks": 32, "api_start_per_task": api,
                "dns_start_per_task": dns, "list_bytes_start": 3.2e6, "peak_mb": [30.5], "start_s": 1.3,
                "peers": [512, 0, 0],
                "list": {"seconds": 12.0, "requests": 9, "bytes": 48e6, "done_s": 13.5, "completed": True},
                "steady": {"seconds": 1200.0, "per_task_min": 0.5, "by_verb": {"watch pods": 320},
                           "renewals": 320, "dns_per_task_min": 0.0},
                "fault": {"fencer_requests_per_task": 2.0, "follower_requests_per_task": 7.0,
                          "node_not_ready_s": 52.0, "failed_s": 305.1, "replaced_s": 307.0},
                "beside": ["launchers-ps-64-after", "launchers-ps-64-before"],
                "cpu_idle_pct": [40.0, 55.5, 61.2, 58.0]}  # fmt: skip

    windows = {"start_limit_s": 600, "list_limit_s": 600, "steady_s": 1200, "fault_s": 420, "floor_qps": 20,
               "floor_burst": 30}  # fmt: skip
    data = {"nodes": 256, "node_pods": 32, "before": "254fea0", "chart_before": "a791f8d", "windows": windows,
            "starts": [start(64, False), start(512, False), start(512, True), start(512, True, "a791f8d")],
            "floors": [{"shape": "mwms", "tasks": 512, "gang": True, "marks": {"running": 25.6}},
                       {"shape": "mwms", "tasks": 512, "marks": {"running": 10.0}}],  # saved before floors had a gang
            "launchers": [launchers("before", 0.9, 1024.0), launchers("after", 3.1, 48.0)]}  # fmt: skip
    text = "\n".join(report.simulated(data))
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    mwms = (
        "| MultiWorkerMirrored | 512 | on | once per run | 0.60 | 25.60 | 34.13 | 34.13 | 25.60 | 1.33x | 20.00 "
        "| 3072 | 6 | 40.00 | 30.00 | 89 | 0 |"  # the pod: 40 KB as the API's JSON, 30 KB in etcd
    )
    assert mwms in rows
    # each start against the floor of its kind: the gang's above, the bare pods' (no gang) here
    assert mwms.replace("| on |", "| off |").replace("| 25.60 | 1.33x |", "| 10.00 | 3.41x |") in rows
    before = mwms.replace("once per run", "in every pod (a791f8d)")
    assert rows.index(before) == rows.index(mwms) - 1, "the earlier chart's row comes first"
    assert "with the chart of a791f8d" in text
    assert (
        "| ps | 512 | after | 32 | 1.30 | 3.10 | 48.00 | 0.10 | 12.00 | 9 | 48.00 | 13.50 | yes | 30.50 | 512 | 40.00 |"
        in rows
    )
    assert (
        "| ps | 512 | after | 32 | 0.50 | watch pods 0.50 | 320 | 0.00 | 2.00 | 7.00 | 52.00 | 305.10 | 307.00 | 2 "
        "| 61.20 |" in rows
    )
    assert "several such runs at once" in text
    with pytest.raises(SystemExit, match="beside"):
        report.simulated({**data, "launchers": [{k: v for k, v in launchers("after", 1, 1).items() if k != "beside"}]})
    for stated in ("at most 600 s", "the next 20 minutes", "for 420 s", "20 a second, bursts of 30"):
        assert stated in text
    assert (tmp_path / "bench-simulated-starts.png").stat().st_size > 0
    with pytest.raises(SystemExit, match="smoke"):
        report.simulated({**data, "smoke": True})
    with pytest.raises(SystemExit, match="predate"):
        report.simulated({k: v for k, v in data.items() if k != "windows"})


def parts_root(tmp_path: Path) -> Path:
    """A tree with every file the benchmark's fingerprint reads (one file in each folder)."""
    root = tmp_path / "repo"
    for name in sim_parts.FINGERPRINTED:
        path = root / name
        if (ROOT / name).is_dir():
            path.mkdir(parents=True)
            (path / "a.txt").write_text(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(name)
    return root


def test_a_saved_part_counts_only_while_what_it_measured_is_unchanged(tmp_path):
    """bench_sim.py's parts: one measured with other code (a chart template, the simulated cluster) or
    another setup (its windows) is measured again; a change elsewhere in the repository keeps it."""
    root = parts_root(tmp_path)
    setup = {"nodes": 256, "windows": {"steady_s": 1200}}
    store = sim_parts.Store(tmp_path / "parts", setup, root)
    part = sim_parts.Part("floor", "mwms", 64)
    store.save(part, {"shape": "mwms", "tasks": 64, "marks": {"running": 3.2}}, 61.0)
    assert store.load(part)["figures"]["marks"] == {"running": 3.2}
    (root / "README.md").write_text("docs")
    assert sim_parts.Store(tmp_path / "parts", setup, root).load(part) is not None
    (root / "charts/tf-cluster/templates/a.txt").write_text("another template")
    changed = sim_parts.Store(tmp_path / "parts", setup, root)
    assert changed.load(part) is None and changed.stale(part)
    assert sim_parts.Store(tmp_path / "parts", {**setup, "windows": {"steady_s": 180}}, root).print != changed.print
    (root / "hack/node/sim.py").write_text("another cluster")
    assert sim_parts.Store(tmp_path / "parts", setup, root).print != changed.print


def test_the_benchmark_resumes_by_parts_and_assembles_only_todays(tmp_path):
    """The plan groups a release's floor and starts (measured together, alone) with its launchers' parts
    (each in a cluster of its own); a group with its floor or a start missing measures all of them
    again (a start is compared with its floor), a missing launchers' part only itself; what report.py
    reads holds today's parts and names the missing ones, and the report publishes no table while any is."""
    root = parts_root(tmp_path)
    groups = sim_parts.plan([64], {"mwms", "mwms-gang"}, ["before", "after"], "a791f8d", [64])
    assert [[p.name for p in g] for g in groups] == [
        [
            "floor-mwms-64-nogang",
            "start-mwms-64-nogang-chart-a791f8d",
            "start-mwms-64-nogang",
            "launchers-mwms-64-before",
            "launchers-mwms-64-after",
        ],
        ["floor-mwms-64-gang", "start-mwms-64-gang-chart-a791f8d", "start-mwms-64-gang"],
    ]
    store = sim_parts.Store(tmp_path / "parts", {"nodes": 256}, root)
    release, gang = groups
    assert store.to_measure(release) == release
    for part in (*release[:4], *gang):
        store.save(part, {"part": part.name}, 90.0)
    assert store.to_measure(release) == [release[4]], "a launchers' part alone: it starts its own release"
    store.path(release[1]).unlink()
    assert store.to_measure(release) == [*release[:3], release[4]], "a start again: its floor and the others too"
    store.save(release[1], {"part": release[1].name}, 90.0)
    assert store.to_measure(gang) == [] and store.to_measure(gang, again=True) == gang
    d = store.assembled(groups)
    assert [f["part"] for f in d["floors"]] == ["floor-mwms-64-nogang", "floor-mwms-64-gang"]
    assert len(d["starts"]) == 4 and d["launchers"] == [{"part": "launchers-mwms-64-before"}] and d["nodes"] == 256
    assert d["missing"] == ["launchers-mwms-64-after"]
    with pytest.raises(SystemExit, match="1 part"):
        report.refuse_unpublishable({**d, "windows": {}})
    # a sitting's budget: a launchers' part is bounded by its release's start and its windows, a start
    # by its pods' creation
    windows = {"list_limit_s": 600, "steady_s": 1200, "fault_s": 420}
    big = sim_parts.Part("launchers", "ps", 4096, launcher="after")
    assert 32 < release[3].minutes(windows) < 38 < big.minutes(windows) < 50
    assert sim_parts.Part("start", "ps", 4096).minutes(windows) < sim_parts.Part("start", "ps", 4096, True).minutes(
        windows
    )
    assert (release[3].slots, big.slots) == (1, 2), "a 4096-task cluster holds two slots"

    # the floors and starts first, each group's all or none; then the launchers' parts that end in time
    def limits(p: sim_parts.Part) -> float:
        return p.minutes(windows)

    head = sum(p.minutes(windows) for p in release[:3])
    gang_head = sum(p.minutes(windows) for p in gang)
    one = release[3].minutes(windows)
    assert sim_parts.fitting(groups, limits, 1000) == ([release[:3], gang], release[3:])
    assert sim_parts.fitting(groups, limits, head + gang_head + one + 1) == ([release[:3], gang], [release[3]])
    assert sim_parts.fitting(groups, limits, head + gang_head + one + 1, slots=2) == (
        [release[:3], gang],
        release[3:],
    ), "two slots: both launchers' parts in the time of one"
    assert head < gang_head
    assert sim_parts.fitting(groups, limits, head + 0.1) == ([release[:3]], []), "a group that does not fit waits"
    assert sim_parts.fitting(groups, limits, head - 0.1) == ([], [])
    # two slots: a 4096-task part waits for both; the parts after it wait for it
    small = [sim_parts.Part("launchers", "mwms", 64, launcher=w) for w in ("before", "after")]
    plan = sim_parts.schedule([small[0], big, small[1]], limits, 2)
    assert [(p.name, b) for p, b, _ in plan] == [
        ("launchers-mwms-64-before", 0),
        ("launchers-ps-4096-after", small[0].minutes(windows)),
        ("launchers-mwms-64-after", small[0].minutes(windows) + big.minutes(windows)),
    ]
    # a sitting plans with what a part took when last measured (a quarter more), stale or not
    assert store.estimate(release[0], windows) == pytest.approx(1.25 * 90 / 60)
    assert store.estimate(release[4], windows) == release[4].minutes(windows), "never measured: its limits"
    (root / "charts/tf-cluster/templates/a.txt").write_text("another template")
    changed = sim_parts.Store(tmp_path / "parts", {"nodes": 256}, root)
    assert changed.stale(release[0]) and changed.estimate(release[0], windows) == pytest.approx(1.875)
    # a launchers' part measured with a shorter steady window: planned with the window's growth added
    changed.save(release[3], {"part": release[3].name, "steady": {"seconds": 1200.0}}, 2000.0)
    longer = {**windows, "steady_s": 2400}
    assert changed.estimate(release[3], longer) == pytest.approx((1.25 * 2000 + 1200) / 60)
    assert changed.estimate(release[3], windows) == pytest.approx(1.25 * 2000 / 60), "same window: as it took"


@pytest.mark.parametrize("flag,bad", [("--sizes", "abc"), ("--sizes", "64,0"), ("--beside", "0"), ("--beside", "-1")])
def test_the_benchmarks_sizes_and_slots_are_refused_with_the_value_named(capsys, monkeypatch, flag, bad):
    """bench_sim.py --sizes abc, --beside 0: argparse's error naming the flag and the value, not a
    traceback (--beside 0 was an IndexError in sim_parts.schedule)."""
    import bench_sim

    assert bench_sim.sizes("64, 512") == [64, 512] and bench_sim.sizes("") == []
    assert bench_sim.slots("4") == 4
    monkeypatch.setattr(sys, "argv", ["bench_sim.py", flag, bad, "--plan"])
    with pytest.raises(SystemExit):
        bench_sim.parse_args()
    err = capsys.readouterr().err
    assert flag in err and repr(bad) in err, err


def audit_event(task: str, verb: str, at: float, uri: str, resource: str = "pods", took: float = 0.5) -> dict:
    from datetime import datetime, timezone

    def stamp(t: float) -> str:
        return datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")

    return {"verb": verb, "requestURI": uri, "objectRef": {"resource": resource},
            "user": {"extra": {sim_audit.POD_NAME: [task]}},
            "requestReceivedTimestamp": stamp(at), "stageTimestamp": stamp(at + took)}  # fmt: skip


def test_the_audit_log_gives_each_fencers_first_list_whole_and_each_tasks_watch_renewals():
    """bench_sim.py's windows read the audit log by task (its pod-bound token): a paged LIST's pages are
    one LIST until the task asks anything else of the release's pods; a renewal is a task's watch after its
    first of the same resource and selectors (another task's, or another selector's, is a first)."""
    release = "/api/v1/namespaces/n/pods?labelSelector=app.kubernetes.io%2Finstance%3Dt"
    own = "/api/v1/namespaces/n/pods?labelSelector=job-index%3D3"
    events = [
        audit_event("w-0", "list", 10.0, release + "&limit=250"),
        audit_event("w-0", "list", 11.0, release + "&limit=250&continue=abc", took=2.0),
        audit_event("w-0", "watch", 13.5, release + "&watch=1&resourceVersion=5"),
        audit_event("w-0", "list", 20.0, release + "&limit=250"),  # a second LIST (after a 410): not the first's
        audit_event("w-1", "list", 10.0, release + "&limit=250"),  # no watch yet: not known to be whole
        audit_event("w-0", "watch", 400.0, release + "&watch=1&resourceVersion=9"),
        audit_event("w-0", "watch", 12.0, own + "&watch=1"),
        audit_event("w-0", "watch", 72.0, own + "&watch=1"),
        audit_event("w-1", "watch", 12.0, own + "&watch=1"),
    ]
    selector = "app.kubernetes.io/instance=t"
    first = sim_audit.first_list(events, "w-0", selector)
    assert first is not None and (first["pages"], first["complete"]) == (2, True)
    assert first["began"] == pytest.approx(10.0) and first["done"] == pytest.approx(13.0)
    assert sim_audit.first_list(events, "w-1", selector)["complete"] is False
    assert sim_audit.first_list(events, "w-2", selector) is None
    renewed = sim_audit.renewals(events)
    assert [(sim_audit.task_of(e), sim_audit.received(e)) for e in renewed] == [("w-0", 72.0), ("w-0", 400.0)]
    assert sim_audit.by_verb(sim_audit.within(events, 0, 100)) == {"list pods": 4, "watch pods": 4}


def test_the_simulated_clusters_launchers_get_the_tf_config_the_kubelet_composes():
    """hack/node/sim.py runs the real launcher with its kwok pod's environment: TF_CONFIG composed from the
    run's ConfigMap and the pod's index, as manifests.resolve_env (and the kubelet) compose it."""
    sys.path.insert(0, str(ROOT / "hack"))
    from node.sim import pod_env

    from tf_cluster import manifests

    docs = helm.parse(
        helm.Helm("4").template("t", helm.Values.of([ROOT / "values-examples" / "parameter-server.yaml"]))
    )
    job = next(d for d in docs if d["kind"] == "Job" and "-worker-" in d["metadata"]["name"])
    template = job["spec"]["template"]
    pod = {
        "metadata": {**template["metadata"], "name": "w-1", "namespace": "default",
                     "annotations": {manifests.INDEX_ANNOTATION: "1"}},
        "spec": template["spec"],
        "status": {},
    }  # fmt: skip
    maps = manifests.config_maps(docs)
    asked = []

    def config_map(name: str) -> dict:
        asked.append(name)
        return maps[name]

    env = pod_env(pod, config_map)
    want = manifests.resolve_env(
        template["spec"]["containers"][0], index=1, namespace="default", node_cpus=1, config_maps=maps
    )
    assert json.loads(env["TF_CONFIG"]) == json.loads(want["TF_CONFIG"])
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}
    assert asked == [job["metadata"]["name"].replace("-worker-", "-tf-config-")]


def test_the_events_section_reads_what_bench_sim_events_saves_and_says_when_the_bound_is_passed():
    """report.sim_events turns bench_sim_events.py's JSON into its table and its verdict against the
    bound (figures made up here)."""
    import bench_sim_events

    def run(shape: str, requests: int, bound: int) -> dict:
        return {"shape": shape, "tasks": 4096, "sampled": 32, "period_s": 409.6, "all_running_s": 204.8,
                "waits": [150.0, 190.5],
                "event_requests": requests, "event_requests_per_task": round(requests / 32, 2),
                "event_requests_bound": bound, "event_requests_bound_per_task": round(bound / 32, 2),
                "event_objects_per_task": 1.0, "event_bytes_per_task": 1024, "release_requests_total": 40960,
                "events_by_reason": {"WaitingForPeers": {"objects": 32, "moments": 1216}}}  # fmt: skip

    data = {"nodes": 256, "sample": 32, "tail_s": 60.0, "every_s": 30.0, "release_rate": 10.0,
            "runs": [run("mwms", 160, 224)]}  # fmt: skip
    text = "\n".join(report.sim_events(data))
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    # 5 requests a task, for 4096 tasks over 204.8 s: 100/s, half of the start's 40960 requests
    assert (
        "| MultiWorkerMirrored | 4096 | 32 | 409.60 | 204.80 | 190.50 | 5.00 | 7.00 | 1.00 | 38.00 | 1.00 "
        "| 100.00 | 50.00 | WaitingForPeers 32 |" in rows
    )
    assert "Every release stayed within the bound." in text
    assert "30 s, or N/10 s in a release of N tasks past 300" in text
    data["runs"].append(run("ps", 300, 224))
    assert "Over the bound: ps at 4096 tasks." in "\n".join(report.sim_events(data))
    # the script's bound is the launcher's own period: 30 s up to 300 tasks, then N/10 s
    events = bench_sim_events.launcher_events()
    assert [events.period(n) for n in (2, 300, 512, 4096)] == [30.0, 30.0, 51.2, 409.6]


def test_a_sitting_stopped_with_sigterm_leaves_no_process_of_its_own_behind(tmp_path):
    """`make bench-sim` runs bench_sim.py under reaped.py: a SIGTERM reaches the sitting, and what
    it left behind when it exited (a process started by a thread it no longer tracked: a smoke
    sitting stopped so left one part's cluster and 64 launchers and agents running) is stopped."""
    pid_file = tmp_path / "left.pid"
    sitting = tmp_path / "sitting.py"
    sitting.write_text(
        "import signal, subprocess, sys, threading, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit('stopped (SIGTERM)'))\n"
        "def start():  # a thread's process the sitting does not take down, ignoring SIGTERM too\n"
        "    p = subprocess.Popen(['sh', '-c', 'trap \"\" TERM; sleep 300'])\n"
        "    # and one in a process group of its own, as a launcher starts its program\n"
        "    subprocess.Popen(['sh', '-c', 'sleep 300'], process_group=0)\n"
        f"    open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "threading.Thread(target=start, daemon=True).start()\n"
        "time.sleep(300)\n"
    )
    runner = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("reaped.py")), sys.executable, str(sitting)],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = int(pid_file.read_text())
    session = os.getsid(left)
    assert session != os.getsid(0) and left in reaped.members(session), "the sitting's: a session of their own"

    def groups() -> tuple[int, set[int]]:  # the session's processes and their process groups
        found = reaped.members(session)
        return len(found), {os.getpgid(p) for p in found}

    deadline = time.monotonic() + 30
    count, pgids = groups()
    while count < 5 or len(pgids) < 2:  # the sitting, 2 sh and their sleeps, in 2 groups
        if time.monotonic() > deadline:
            runner.kill()
            reaped.reap(session, grace=0)
            raise AssertionError(f"the sitting's processes and their process groups: {count}, {pgids}")
        time.sleep(0.1)
        count, pgids = groups()
    runner.send_signal(signal.SIGTERM)
    _, err = runner.communicate(timeout=60)
    assert runner.returncode == 1, err  # the sitting's own exit code: sys.exit("stopped (SIGTERM)")
    assert "stopped (SIGTERM)" in err and "4 process(es) left behind by" in err, err  # two sh and their sleeps
    assert "(2 sh, 2 sleep): stopped" in err, err  # what they were, by name
    assert reaped.members(session) == [], "nothing of the sitting's session is left (a zombie waiting for init aside)"


def test_a_simulated_cluster_taken_down_starts_nothing_more(tmp_path):
    """The race a SIGTERM met in bench_sim.py: a part's thread still starting its cluster, or its
    launchers, after the main thread took that cluster down. Once down() has run, start() (the
    cluster's own processes) and task() (a launcher) are refused, and down() stops the launchers
    task() started."""
    sys.path.insert(0, str(ROOT / "hack"))  # the node harness, as bench_sim.py imports it
    from node.sim import SimCluster

    sim = SimCluster(tmp_path, nodes=1)
    sim.start("sleeper", ["sleep", "300"])
    sleeper = sim.procs["sleeper"]
    sim.down()
    assert sleeper.poll() is not None, "down() stopped what the cluster started"
    with pytest.raises(RuntimeError, match="was taken down: nothing more starts in it"):
        sim.start("late", ["sleep", "300"])
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"serviceAccountName": "sa"}}
    with pytest.raises(RuntimeError, match="was taken down"):
        sim.task(pod, tmp_path / "launcher.py", ["true"], tmp_path)
    assert "late" not in sim.procs and sim.tasks == []


def test_a_lost_nodes_launcher_takes_its_program_with_it():
    """bench_sim's fault kills a launcher as its node dies; its program, in a process group of its
    own (as today's launcher starts it), must not outlive it (reaped.py found such leftovers)."""
    import types

    import bench_sim

    starts_program = "import subprocess, time; subprocess.Popen(['sleep', '60'], process_group=0); time.sleep(60)"
    launcher = subprocess.Popen([sys.executable, "-c", starts_program])
    deadline = time.monotonic() + 10
    while not bench_sim.children(launcher.pid):
        assert time.monotonic() < deadline, "the launcher started no program"
        time.sleep(0.05)
    (program,) = bench_sim.children(launcher.pid)
    assert os.getpgid(program) != os.getpgid(launcher.pid)
    launchers = bench_sim.Launchers.__new__(bench_sim.Launchers)  # only what kill() reads
    launchers.procs, launchers.lost = {"w-0": launcher}, set()
    launchers.sim = types.SimpleNamespace(agents={})
    launchers.kill("w-0")
    launcher.wait(10)

    def running(pid: int) -> bool:  # neither gone nor a zombie (read at once: it may be reaped meanwhile)
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + 10
    while running(program):
        assert time.monotonic() < deadline, "the program outlived its launcher"
        time.sleep(0.05)
    assert launchers.lost == {"w-0"}
