"""Commands never delete what they did not make (issue 44): `run-local --workdir` and tune's
trial folders empty only a directory tf-cluster made (its marker file), or an empty one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tf_cluster import ROOT, errors
from tf_cluster.localrun.processes import WORKDIR_MARKER, clean_workdir

EXAMPLE = ROOT / "values-examples" / "mwms-cpu.yaml"


def test_run_local_refuses_a_users_folder_as_workdir_and_leaves_it_intact(tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("the user's own file\n")
    r = subprocess.run(
        [sys.executable, "-m", "tf_cluster.cli", "run-local", "-f", EXAMPLE, "--workdir", "."],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "tooling")},
        timeout=120,
    )
    assert r.returncode == errors.UsageError.exit_code, r.stderr
    assert "Traceback" not in r.stderr
    assert "did not make" in r.stderr and str(tmp_path) in r.stderr, r.stderr
    assert mine.read_text() == "the user's own file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"], "nothing added either"


def test_a_run_directory_tf_cluster_made_is_emptied_for_the_next_run(tmp_path):
    run = tmp_path / "run"
    clean_workdir(run)
    assert (run / WORKDIR_MARKER).is_file()
    (run / "logs").mkdir()
    (run / "logs" / "worker-0.log").write_text("old run\n")
    clean_workdir(run)
    assert sorted(p.name for p in run.iterdir()) == [WORKDIR_MARKER]


def test_an_empty_directory_is_used_and_a_file_or_unmarked_folder_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    clean_workdir(empty)
    assert (empty / WORKDIR_MARKER).is_file()
    a_file = tmp_path / "model.h5"
    a_file.write_bytes(b"weights")
    with pytest.raises(errors.UsageError, match="is a file"):
        clean_workdir(a_file)
    assert a_file.read_bytes() == b"weights"
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "data.csv").write_text("1,2\n")
    with pytest.raises(errors.UsageError, match="did not make"):
        clean_workdir(theirs)
    assert (theirs / "data.csv").read_text() == "1,2\n"
    # the default runs/<release> is tf-cluster's own even without the marker (older versions)
    clean_workdir(theirs, owned=True)
    assert sorted(p.name for p in theirs.iterdir()) == [WORKDIR_MARKER]
