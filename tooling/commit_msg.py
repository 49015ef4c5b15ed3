"""The commit message's shape (pre-commit's commit-msg hook; CONTRIBUTING.md): a subject of at most
72 characters, a blank line, then a body that says why. `git commit -m SUBJECT -m BODY` writes that.

    python3 tooling/commit_msg.py .git/COMMIT_EDITMSG    # exit 1 with the reasons, else 0

Lines git drops are not counted: comments (`#`) and everything below `git commit -v`'s scissors
line. Merge commits and `fixup!`/`squash!`/`amend!` commits (folded away by `rebase --autosquash`)
are let through."""

from __future__ import annotations

import sys
from pathlib import Path

MAX_SUBJECT = 72
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


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: commit_msg.py COMMIT_MSG_FILE", file=sys.stderr)
        return 2
    found = problems(Path(argv[0]).read_text(encoding="utf-8", errors="replace"))
    for problem in found:
        print(f"commit message: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
