"""`tf-cluster tune` on the real node: docs/user-guide/tuning.md's example study with every trial a Helm
release (2 at once), its metric read from the pods' logs (the launcher echoes the program's
cloudml-hypertune reports), and no release left behind."""

from __future__ import annotations

import subprocess
import sys

from test_cluster import KUBECONFIG, SMALL, say

from tf_cluster import ROOT, helm, kube, tune

EXAMPLE = ROOT / "values-examples" / "tune"


def test_the_example_study_runs_on_the_node_with_trials_as_releases(api, ns, tmp_path):
    out = tmp_path / "study"
    argv = [sys.executable, "-m", "tf_cluster.cli", "tune", "-f", str(EXAMPLE / "values.yaml"), "-f", str(SMALL)]
    argv += ["--script", str(EXAMPLE / "train.py"), "--space", str(EXAMPLE / "space.yaml"), "--out", str(out)]
    argv += ["--kubeconfig", KUBECONFIG, "-n", ns]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1500)
    print(r.stdout[-3000:])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
    import optuna

    study = optuna.load_study(study_name="spirals", storage=tune.storage_url(out, None))
    assert len(tune.counted(study)) == 6 == len(study.trials)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert complete and all(0 < t.value <= 1 for t in complete)
    starts = sorted(t.datetime_start for t in study.trials)
    ends = sorted(t.datetime_complete for t in study.trials)
    assert starts[1] < ends[0], "two trials ran at once"
    assert (out / "best-values.yaml").is_file() and (out / "plots" / "optimization-history.png").is_file()
    # no release, Job or pod left behind
    listed = helm.Helm(kubeconfig=KUBECONFIG, namespace=ns).releases()
    assert listed == [], listed
    for t in study.trials:
        assert kube.release_objects(api, ns, tune.release_name("spirals", t.number)) == []
    say(f"tuning on the node: best trial {study.best_trial.number}, accuracy {study.best_value:.4f}")
