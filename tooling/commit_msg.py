"""The commit message's shape (pre-commit's commit-msg hook; CONTRIBUTING.md): a subject of at most
72 characters, a blank line, then a body that says why. `git commit -m SUBJECT -m BODY` writes that.

    python3 tooling/commit_msg.py .git/COMMIT_EDITMSG    # exit 1 with the reasons, else 0
    python3 tooling/commit_msg.py --history              # every commit since BASE (make lint)

Lines git drops are not counted: comments (`#`) and everything below `git commit -v`'s scissors
line. Merge commits and `fixup!`/`squash!`/`amend!` commits (folded away by `rebase --autosquash`)
are let through by the hook; `--history` lets merge commits through (git writes their message) but
not a fixup left unfolded.

`--history` checks the commits of HEAD that are neither BASE's ancestors nor a release tag's
(`tf-cluster-*`, when the clone has them): the rule holds from BASE on, the main branch's head when
the check was added, because history older than it breaks the rule and cannot be rewritten. A
clone that lacks BASE (a shallow one) fails, saying so: it cannot tell which commits to check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MAX_SUBJECT = 72
# The first commit the rule is checked from (exclusive): main's head when `make lint` began checking
# history. Older commits are kept as they are; CONTRIBUTING.md says so.
BASE = "896d0fdf87912b82dc43d43da50d5bc7fb037c6f"
TAG_PATTERN = "tf-cluster-*"  # release tags (tooling/tf_cluster/release.py TAG_PREFIX)
SCISSORS = "# ------------------------ >8 ------------------------"
EXEMPT = ("Merge ", "fixup! ", "squash! ", "amend! ")


def message_lines(text: str) -> list[str]:
    """The message as git keeps it: no comment lines, nothing below the scissors, no trailing blanks."""
    text = text.split(SCISSORS, 1)[0]
    lines = [line.rstrip() for line in text.splitlines() if not line.startswith("#")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def problems(text: str) -> list[str]:
    """What is wrong with a commit message, in words; [] when it has the shape."""
    lines = message_lines(text)
    if not lines:
        return ["the message is empty"]
    subject = lines[0]
    if subject.startswith(EXEMPT):
        return []
    found = []
    if len(subject) > MAX_SUBJECT:
        found.append(f"the subject is {len(subject)} characters; at most {MAX_SUBJECT}, please: {subject!r}")
    if len(lines) < 3 or lines[1] or not any(line.strip() for line in lines[2:]):
        if len(lines) > 1 and lines[1]:
            found.append("the subject's second line is not blank: one line of subject, a blank line, then the body")
        else:
            found.append('no body: after the subject, a blank line and a few lines on why (git commit -m S -m "BODY")')
    return found


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


class HistoryError(Exception):
    """The commits to check cannot be told apart: BASE is missing (a shallow clone)."""


def commits_to_check(repo: Path, base: str = BASE) -> list[str] | None:
    """The commits of HEAD above `base` and above every release tag, newest first, merges left out;
    None when `repo` is not a git checkout (a source archive: it has no commits)."""
    if git(repo, "rev-parse", "--verify", "-q", "HEAD").returncode != 0:
        return None
    if git(repo, "cat-file", "-e", f"{base}^{{commit}}").returncode != 0:
        shallow = git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        why = "this clone is shallow" if shallow else "this clone does not have it"
        raise HistoryError(
            f"the commit the message rule is checked from, {base[:12]} (tooling/commit_msg.py BASE), is missing: "
            f"{why}. Fetch the history (`git fetch --unshallow`, or clone without --depth), then run it again"
        )
    tags = git(repo, "tag", "--list", TAG_PATTERN).stdout.split()
    r = git(repo, "rev-list", "--no-merges", "HEAD", f"^{base}", *(f"^{t}" for t in tags))
    if r.returncode != 0:
        raise HistoryError(f"git rev-list failed: {r.stderr.strip()}")
    return r.stdout.split()


def commit_problems(repo: Path, sha: str) -> list[str]:
    """What is wrong with one commit's message, each line naming the commit."""
    message = git(repo, "log", "-1", "--format=%B", sha).stdout
    subject = (message.strip().splitlines() or [""])[0]
    found = problems(message)
    if subject.startswith(EXEMPT[1:]):  # let through at commit time, but a fixup left in history is a commit
        found = [f"{subject.split('!')[0]}! commit not folded into its target: `git rebase -i --autosquash`"]
    return [f"{sha[:12]} {subject[:50]!r}: {problem}" for problem in found]


def history_main(repo: Path, base: str = BASE) -> int:
    """`--history`: exit 1 naming each commit since `base` whose message breaks the rule, else 0."""
    try:
        commits = commits_to_check(repo, base)
    except HistoryError as e:
        print(f"commit messages: {e}", file=sys.stderr)
        return 1
    if commits is None:
        print(f"commit messages: {repo} is not a git checkout, no commits to check")
        return 0
    found = [problem for sha in commits for problem in commit_problems(repo, sha)]
    for problem in found:
        print(f"commit message: {problem}", file=sys.stderr)
    if found:
        print(
            "commit messages: reword them (`git rebase -i`, `reword`) before they reach main: a subject of "
            "at most 72 characters, a blank line, a body saying why (CONTRIBUTING.md)",
            file=sys.stderr,
        )
        return 1
    print(f"commit messages: the {len(commits)} commit(s) since {base[:12]} have the shape")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--history"] and len(argv) <= 2:
        return history_main(Path(argv[1]) if len(argv) == 2 else Path.cwd())
    if len(argv) != 1:
        print("usage: commit_msg.py COMMIT_MSG_FILE | commit_msg.py --history [REPO]", file=sys.stderr)
        return 2
    found = problems(Path(argv[0]).read_text(encoding="utf-8", errors="replace"))
    for problem in found:
        print(f"commit message: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
