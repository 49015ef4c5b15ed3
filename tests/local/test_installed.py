"""tf-cluster installed like a real tool: the wheel in a fresh virtualenv outside the repository.

The wheel is built from this checkout (`pip wheel`, the hatchling backend of pyproject.toml) and
installed into a virtualenv under a temporary folder; every command then runs from another
temporary folder with a PATH that holds only that virtualenv and the system's bin folders, so the
chart, the launcher, the CRDs and the trainers can only come from the package's own data. The
example values file is copied next to it, as a user would have it. Real TensorFlow trains.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from installed import install_wheel

from tf_cluster import ROOT

NO_DEPS = ROOT / "tooling" / "requirements-nodeps.txt"


def run(argv: list[str], cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(tf-cluster executable, a user folder to run it in, its environment)."""
    # The wheel with what run-local trains with: the CPU-only TensorFlow and tf-keras without its
    # `tensorflow` requirement, as `make demo` installs them (the `local` extra names the full
    # wheel, twice the download), at the project's pins.
    exe, user, env = install_wheel(tmp_path_factory.mktemp("installed"), "tensorflow-cpu", "tensorboard")
    vpip = [str(Path(exe).with_name("python")), "-m", "pip", "--disable-pip-version-check", "-q", "install"]
    proc = subprocess.run([*vpip, "--no-deps", "-r", str(NO_DEPS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    shutil.copy2(ROOT / "values-examples" / "mwms-cpu.yaml", user / "mwms-cpu.yaml")
    return exe, user, env


def test_the_package_reads_its_own_data_not_the_checkout(installed):
    exe, user, env = installed
    probe = "import tf_cluster as t; print(t.__file__); print(t.CHART); print(t.IN_CHECKOUT)"
    out = run([str(Path(exe).with_name("python")), "-c", probe], user, env)
    assert out.returncode == 0, out.stderr
    module, chart, in_checkout = out.stdout.split()
    assert "site-packages" in module and not module.startswith(str(ROOT))
    assert chart.endswith("site-packages/tf_cluster/_data/chart") and in_checkout == "False"
    help_ = run([exe, "--help"], user, env)
    assert help_.returncode == 0 and "run-local" in help_.stdout, help_.stderr
    version = run([exe, "--version"], user, env)
    assert version.stdout.strip() == f"tf-cluster {chart_version()}"
    # the user guide the hints name (`tf-cluster docs storage`), from the package, with the chart's
    # README where the values reference includes it
    for name, page in (("storage", "docs/user-guide/storage.md"), ("exit-codes", "docs/reference/exit-codes.md")):
        out = run([exe, "docs", name], user, env)
        assert out.returncode == 0 and out.stdout == (ROOT / page).read_text(), out.stderr
    values = run([exe, "docs", "reference/values"], user, env)
    assert values.returncode == 0 and (ROOT / "charts" / "tf-cluster" / "README.md").read_text() in values.stdout


def chart_version() -> str:
    import yaml

    return str(yaml.safe_load((ROOT / "charts" / "tf-cluster" / "Chart.yaml").read_text())["version"])


def test_render_fetches_helm_into_an_empty_user_cache(installed, tmp_path):
    """No Helm on PATH and an empty cache: the pinned Helm 4 is fetched once, with a line saying so."""
    exe, user, env = installed
    env = {**env, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = run([exe, "render", "-f", "mwms-cpu.yaml", "--tf-config"], user, env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "[helm] no Helm 4 on PATH: fetching Helm" in out.stderr
    assert list((tmp_path / "cache" / "tf-cluster").glob("helm-v4.*/helm"))
    assert "worker:0" in out.stdout and "worker:1" in out.stdout
    again = run([exe, "render", "-f", "mwms-cpu.yaml"], user, env)
    assert again.returncode == 0 and "fetching" not in again.stderr
    assert "kind: Job" in again.stdout


def test_run_local_trains_the_example_to_completion(installed):
    exe, user, env = installed
    out = run([exe, "run-local", "-f", "mwms-cpu.yaml"], user, env, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Result: every Job Complete." in out.stdout + out.stderr
    assert (user / "runs" / "tf" / "volumes").is_dir()  # outputs go to the user's folder, not site-packages


def test_verbs_that_need_a_checkout_or_an_extra_say_so(installed):
    exe, user, env = installed
    package = run([exe, "package"], user, env)
    assert package.returncode == 2 and "run it from a clone of the repository" in package.stderr
    (user / "space.yaml").write_text("study: s\nmetric: loss\ngoal: minimize\nparams: []\n")
    tune = run([exe, "tune", "-f", "mwms-cpu.yaml", "--space", "space.yaml"], user, env)
    assert tune.returncode == 3, tune.stderr
    assert "tf-cluster[tune]" in tune.stderr and "optuna" in tune.stderr
