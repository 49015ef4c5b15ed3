"""The commit-msg hook (tooling/commit_msg.py, in .pre-commit-config.yaml): a subject of at most 72
characters, a blank line, a body; what git drops (comments, `commit -v`'s diff) is not counted."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tf_cluster import ROOT

sys.path.insert(0, str(ROOT / "tooling"))
import commit_msg  # noqa: E402

BODY = "\n\nWhy it changes, in a sentence or two.\n"
SUBJECT_72 = "s" * 72


@pytest.mark.parametrize(
    "message,found",
    [
        ("Commands only call down" + BODY, []),
        (SUBJECT_72 + BODY, []),
        ("# a comment git drops\nSubject" + BODY + "# Please enter the commit message\n", []),
        ("Subject" + BODY + "# ------------------------ >8 ------------------------\n" + "x" * 200, []),
        ("Merge branch 'a' into main\n", []),
        ("fixup! " + "s" * 80 + "\n", []),
        (SUBJECT_72 + "s" + BODY, ["the subject is 73 characters"]),
        ("Only a subject\n", ["no body"]),
        ("Only a subject\n\n\n# comment\n", ["no body"]),
        ("A subject\nthat runs on\n", ["second line is not blank"]),
        ("", ["the message is empty"]),
        ("# only comments\n", ["the message is empty"]),
        ("s" * 80 + "\n", ["the subject is 80 characters", "no body"]),
    ],
    ids=lambda v: v[:24] if isinstance(v, str) else None,
)
def test_commit_messages_are_judged_by_their_shape(message, found):
    problems = commit_msg.problems(message)
    assert len(problems) == len(found) and all(f in p for f, p in zip(found, problems, strict=True)), problems


def test_the_hook_exits_1_naming_the_problem_and_0_on_a_good_message(tmp_path):
    bad, good = tmp_path / "bad", tmp_path / "good"
    bad.write_text("s" * 73 + "\n")
    good.write_text("A subject" + BODY)
    hook = [sys.executable, str(ROOT / "tooling" / "commit_msg.py")]
    r = subprocess.run([*hook, str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and "73 characters" in r.stderr and "no body" in r.stderr
    assert subprocess.run([*hook, str(good)], capture_output=True, text=True).returncode == 0


def test_pre_commit_runs_it_at_the_commit_msg_stage_with_local_hooks_only():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    assert [r["repo"] for r in config["repos"]] == ["local"]  # nothing to download
    hooks = {h["id"]: h for h in config["repos"][0]["hooks"]}
    assert hooks["commit-msg"]["stages"] == ["commit-msg"] and "commit_msg.py" in hooks["commit-msg"]["entry"]
    assert {"ruff", "ruff-format", "mypy", "yamllint", "helm-docs"} <= set(hooks)


def pins(path) -> dict[str, str]:
    out = {}
    for line in (ROOT / path).read_text().splitlines():
        spec = line.split("#")[0].split(";")[0].strip()
        if "==" in spec:
            name, version = spec.split("==")
            out[name.strip().lower().replace("_", "-")] = version.strip()
    return out


def test_the_lint_venv_pins_every_package_and_agrees_with_the_setup_venv():
    lint, setup = pins("tooling/requirements-lint.txt"), pins("tooling/requirements.txt")
    for tool in ("ruff", "mypy", "yamllint", "pre-commit", "types-pyyaml", "pyyaml", "jinja2"):
        assert tool in lint
    assert {n: (v, setup[n]) for n, v in lint.items() if n in setup and setup[n] != v} == {}


# ----------------------------------------------------------------- the history (`make lint`)

GOOD = "A subject\n\nWhy, in a sentence.\n"


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def commit(repo, message: str, name: str) -> str:
    (repo / name).write_text(name)
    git(repo, "add", name)
    git(repo, "commit", "-q", "--cleanup=verbatim", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path):
    """A repository whose first commit breaks the rule: it is the base, older history as it is."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    for k, v in (("user.email", "test@example.invalid"), ("user.name", "test"), ("commit.gpgsign", "false")):
        git(path, "config", k, v)
    commit(path, "old history without a body", "a")
    return path


def history(repo, base, capsys) -> tuple[int, str]:
    rc = commit_msg.history_main(repo, base)
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_the_history_since_the_base_passes_with_good_messages_and_fails_naming_a_bad_one(repo, capsys):
    base = git(repo, "rev-parse", "HEAD").strip()
    commit(repo, GOOD, "b")
    assert history(repo, base, capsys) == (0, f"commit messages: the 1 commit(s) since {base[:12]} have the shape\n")
    bad = commit(repo, "s" * 73 + "\n", "c")
    commit(repo, GOOD, "d")
    rc, out = history(repo, base, capsys)
    assert rc == 1 and f"{bad[:12]} {'s' * 50!r}: the subject is 73 characters" in out and "no body" in out
    assert "old history" not in out  # the base and what is below it are not checked


def test_an_unfolded_fixup_fails_and_a_merge_passes(repo, capsys):
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "-b", "side")
    commit(repo, GOOD, "b")
    git(repo, "checkout", "-q", "main")
    commit(repo, GOOD, "c")
    git(repo, "merge", "-q", "--no-edit", "side")  # "Merge branch 'side'": no body, written by git
    assert history(repo, base, capsys)[0] == 0
    commit(repo, "fixup! A subject\n", "d")
    rc, out = history(repo, base, capsys)
    assert rc == 1 and "fixup! commit not folded" in out


def test_commits_below_a_release_tag_are_not_checked(repo, capsys):
    base = git(repo, "rev-parse", "HEAD").strip()
    commit(repo, "released with a bad message\n", "b")
    assert history(repo, base, capsys)[0] == 1
    git(repo, "tag", "tf-cluster-9.9.9")  # released: that history can't be rewritten either
    commit(repo, GOOD, "c")
    assert history(repo, base, capsys) == (0, f"commit messages: the 1 commit(s) since {base[:12]} have the shape\n")


def test_a_clone_without_the_base_fails_saying_why(repo, tmp_path, capsys):
    base = git(repo, "rev-parse", "HEAD").strip()
    commit(repo, GOOD, "b")
    commit(repo, GOOD, "c")
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True)
    rc, out = history(shallow, base, capsys)
    assert rc == 1 and "is missing: this clone is shallow" in out and "git fetch --unshallow" in out
    # the command `make lint` runs: BASE (this repository's) is in no temporary repository
    argv = [sys.executable, str(ROOT / "tooling" / "commit_msg.py"), "--history", str(repo)]
    r = subprocess.run(argv, text=True, capture_output=True)
    assert r.returncode == 1 and f"{commit_msg.BASE[:12]} (tooling/commit_msg.py BASE), is missing" in r.stderr


def test_a_folder_that_is_not_a_git_checkout_has_no_commits_to_check(tmp_path, capsys):
    said = f"commit messages: {tmp_path} is not a git checkout, no commits to check\n"
    assert history(tmp_path, commit_msg.BASE, capsys) == (0, said)


def test_make_lint_checks_the_history_and_the_base_is_in_this_clone():
    assert "commit_msg.py --history" in (ROOT / "tooling" / "lint.sh").read_text()
    assert git(ROOT, "merge-base", "--is-ancestor", commit_msg.BASE, "HEAD") == ""
