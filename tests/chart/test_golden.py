"""Golden renders: every example, every tests/golden/cases file and the defaults render to the
checked-in bytes under Helm 4 and Helm 3: a few cases as whole releases (tests/golden/renders),
the others as per-template snapshots (tests/golden/templates/<case>/<template>.yaml). A change to
the templates shows its effect as a diff of tests/golden (`make golden` re-renders them)."""

from __future__ import annotations

import difflib
import sys

import pytest

from tf_cluster import ROOT

sys.path.insert(0, str(ROOT / "tests" / "golden"))
from update import RENDERS, TEMPLATES, WHOLE, cases, goldens, on_disk, render  # noqa: E402

CASES = cases()
FIX = "run `make golden`, then review `git diff tests/golden`"


def test_every_case_has_its_golden_files_and_none_is_stale():
    assert set(WHOLE) <= set(CASES), f"WHOLE names a case that is gone: {set(WHOLE) - set(CASES)}"
    assert sorted(p.stem for p in RENDERS.glob("*.yaml")) == sorted(WHOLE), FIX
    snapshotted = sorted(p.name for p in TEMPLATES.iterdir() if p.is_dir()) if TEMPLATES.is_dir() else []
    assert snapshotted == sorted(set(CASES) - set(WHOLE)), FIX


@pytest.mark.parametrize("name", sorted(CASES))
def test_render_is_byte_identical_to_its_golden_files(name, helm_major):
    got, want = goldens(name, render(CASES[name], helm_major)), on_disk(name)
    if got == want:
        return
    lines = []
    for path in sorted(set(want) - set(got)):
        lines.append(f"{path.relative_to(ROOT)}: no longer rendered (stale)\n")
    for path in sorted(set(got) - set(want)):
        lines.append(f"{path.relative_to(ROOT)}: rendered, but has no golden file\n")
    for path in sorted(set(got) & set(want)):
        old = str(path.relative_to(ROOT))
        lines += difflib.unified_diff(want[path].splitlines(True), got[path].splitlines(True), old, f"helm{helm_major}")
    pytest.fail(f"render of {name} (helm{helm_major}) differs from its golden files ({FIX}):\n{''.join(lines[:80])}")


@pytest.mark.parametrize("name", ["defaults", "notebook-coordinator"])
def test_the_launcher_configmap_carries_the_charts_files_verbatim(name, helm_major):
    """The goldens name the launcher's files instead of holding them (update.py, elide_launcher):
    the ConfigMap holds exactly launcher.py (and, with the notebook, tf_cluster_notebook.py and the
    example notebooks) and every example trainer, the package's every module of
    tf_cluster_launcher/, byte for byte; the pods mount launcher.py beside the package's directory
    and the trainers volume maps each trainer."""
    import yaml
    from update import launcher_file

    docs = [d for d in yaml.safe_load_all(render(CASES[name], helm_major)) if d]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-launcher")]
    (pkg,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-launcher-package")]
    files = ROOT / "charts" / "tf-cluster"
    want = {"launcher.py"}
    if name == "notebook-coordinator":
        want.add("tf_cluster_notebook.py")
    trainers = {f"trainers.{p.name}" for p in (files / "files" / "trainers").glob("*.py")}
    notebooks = {f"notebooks.{p.name}" for p in (files / "files" / "notebooks").glob("*.ipynb")}
    assert set(cm["data"]) == want | trainers | (notebooks if name == "notebook-coordinator" else set())
    for key, text in cm["data"].items():
        assert text == (files / launcher_file(key)).read_text(), f"{key} differs from {launcher_file(key)}"
    # the package's ConfigMap: every module of tf_cluster_launcher/, one key each, byte for byte
    assert set(pkg["data"]) == {p.name for p in (files / "files" / "tf_cluster_launcher").glob("*.py")}
    for key, text in pkg["data"].items():
        assert text == (files / launcher_file(key, package=True)).read_text(), key
    pods = [d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Job"]
    assert pods, "no Job"
    for pod in pods:  # both whole, no items: launcher.py a subPath of one, the package the other
        volumes = {v["name"]: v["configMap"] for v in pod["volumes"] if v["name"].startswith("launcher")}
        assert volumes == {
            "launcher": {"name": cm["metadata"]["name"]},
            "launcher-package": {"name": pkg["metadata"]["name"]},
        }
        for c in [*pod["containers"], *pod.get("initContainers", [])]:
            mounts = {m["mountPath"]: m for m in c["volumeMounts"] if m["name"].startswith("launcher")}
            if c["name"] in ("tensorflow", "tf-cluster-agent", "packages"):
                assert mounts == {
                    "/opt/tf-cluster/launcher/launcher.py": {
                        "name": "launcher", "mountPath": "/opt/tf-cluster/launcher/launcher.py",
                        "subPath": "launcher.py", "readOnly": True,
                    },
                    "/opt/tf-cluster/launcher/tf_cluster_launcher": {
                        "name": "launcher-package", "mountPath": "/opt/tf-cluster/launcher/tf_cluster_launcher",
                        "readOnly": True,
                    },
                }, c["name"]  # fmt: skip
    for v in [v for pod in pods for v in pod["volumes"] if v["name"] == "trainers"]:
        items = {i["key"]: i["path"] for i in v["configMap"]["items"]}
        assert items == {k: launcher_file(k).removeprefix("files/trainers/") for k in trainers}
