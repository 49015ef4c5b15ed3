#!/usr/bin/env bash
# `make lint`: ruff (lint + format check), mypy and yamllint, configured in pyproject.toml and .yamllint,
# from a small virtualenv of their own, .venv-lint/ (tooling/requirements-lint.txt: no TensorFlow, no Go
# builds, nothing `make setup` makes). It is made again when the requirements file changes (a sha256
# stamp), else reused. pre-commit's hooks (.pre-commit-config.yaml) run the same linters from it.
# Then the commit messages since tooling/commit_msg.py's BASE (or the last release tag): the rule the
# commit-msg hook keeps, checked on the history too, since the hook is installed per clone.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-lint
requirements=tooling/requirements-lint.txt
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
  echo "lint: making $venv from $requirements"
  python3 -m venv --clear "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
  echo "$want" > "$venv/.requirements.sha256"
fi
status=0
for check in "ruff check ." "ruff format --check ." "mypy" "yamllint -s ."; do
  echo "lint: $check"
  # shellcheck disable=SC2086  # each check is a command and its words
  "$venv/bin/"$check || status=1
done
echo "lint: commit messages (python3 tooling/commit_msg.py --history)"
python3 tooling/commit_msg.py --history || status=1
exit $status
