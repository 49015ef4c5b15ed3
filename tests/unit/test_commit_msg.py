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
