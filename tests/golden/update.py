"""Re-render the golden files: `make golden`, then review `git diff tests/golden`.

Each case is a values example, a file of tests/golden/cases, or the chart's defaults, rendered by
Helm 4 as release `tf` in namespace `default`, and kept one of two ways:
- a few whole-release renders, renders/<case>.yaml (WHOLE: the defaults, an MWMS example, a
  ParameterServer example with an evaluator, the case with the most features on), to read a
  release as Helm prints it;
- every other case as per-template snapshots, templates/<case>/<template>.yaml: the documents one
  template renders (Helm's `# Source: tf-cluster/templates/<template>` headers split the render),
  so a change to one template changes only its own snapshot files.

tests/chart/test_golden.py checks that Helm 4 and Helm 3 both still render exactly these bytes, so
a refactor shows its effect here and a change to what is rendered is reviewed as a diff.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tf_cluster import ROOT, helm

GOLDEN = ROOT / "tests" / "golden"
RENDERS = GOLDEN / "renders"  # whole-release renders: <case>.yaml
TEMPLATES = GOLDEN / "templates"  # per-template snapshots: <case>/<template path under templates/>
WHOLE = ("defaults", "mwms-cpu", "parameter-server-evaluator", "everything")
# Helm starts every document it prints with these two lines, naming the template it came from
SOURCE = re.compile(r"^---\n# Source: [^/\n]+/templates/(.+)\n", re.MULTILINE)


def cases() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {"defaults": []}
    for p in sorted((ROOT / "values-examples").glob("*.yaml")) + sorted((GOLDEN / "cases").glob("*.yaml")):
        out[p.stem] = [p]
    return out


def render(files: list[Path], major: str = "4") -> str:
    """The render with each document's trailing blank lines dropped: Helm 4.3's splitter keeps
    a document's last newline before an in-file `---` (so `helm template` prints a blank line
    there), Helm 3 trims it. That is the only difference between the two; everything else
    must match byte for byte."""
    text = helm.Helm(major).template("tf", helm.Values.of(files))
    return re.sub(r"\n\s*\n---\n", "\n---\n", text).rstrip() + "\n"


def split(text: str) -> dict[str, str]:
    """A render's documents by the template that rendered them: {"worker-job.yaml": "---\\n# Source:
    ...", ...}, each template's documents in render order, headers kept. Every byte of the render
    is in exactly one of them."""
    heads = list(SOURCE.finditer(text))
    if not heads or heads[0].start() != 0:
        raise ValueError("a render starts with Helm's `---` and `# Source: <chart>/templates/...` lines")
    out: dict[str, str] = {}
    for head, after in zip(heads, [*heads[1:], None], strict=True):
        end = after.start() if after else len(text)
        out[head.group(1)] = out.get(head.group(1), "") + text[head.start() : end]
    return out


# The launcher's files are kept once, as the chart's own files, not in every golden: the launcher
# ConfigMap's value of each is a line naming it (tests/chart/test_golden.py checks that the
# ConfigMap carries each file verbatim).
LAUNCHER_DOC = re.compile(
    r"^# Source: [^/\n]+/templates/launcher-(package-)?configmap\.yaml\n(?:.*\n)*?(?=---\n|\Z)", re.MULTILINE
)
LAUNCHER_FILE = re.compile(r"^  ([\w.]+\.py): \|\n(?:    .*\n|\n)+", re.MULTILINE)


def launcher_file(key: str, package: bool = False) -> str:
    """The chart's file a launcher ConfigMap key holds: trainers.mwms_fit.py ->
    files/trainers/mwms_fit.py, launcher.py -> files/launcher.py; in the package's ConfigMap
    (`package`), task.py -> files/tf_cluster_launcher/task.py."""
    if package:
        return f"files/tf_cluster_launcher/{key}"
    folder, dot, name = key.partition(".")
    return f"files/{folder}/{name}" if dot and name != "py" else f"files/{key}"


def elide_launcher(text: str) -> str:
    def files(doc: re.Match[str]) -> str:
        package = bool(doc.group(1))
        return LAUNCHER_FILE.sub(lambda m: f"  {m.group(1)}: <{launcher_file(m.group(1), package)}>\n", doc.group(0))

    return LAUNCHER_DOC.sub(files, text)


def goldens(name: str, text: str) -> dict[Path, str]:
    """The golden files of case `name` for its render `text`: path -> content."""
    text = elide_launcher(text)
    if name in WHOLE:
        return {RENDERS / f"{name}.yaml": text}
    return {TEMPLATES / name / template: body for template, body in split(text).items()}


def on_disk(name: str | None = None) -> dict[Path, str]:
    """The golden files there are, all or case `name`'s: path -> content."""
    if name is None:
        paths = [*RENDERS.glob("*.yaml"), *TEMPLATES.rglob("*.yaml")]
    else:
        paths = [RENDERS / f"{name}.yaml", *(TEMPLATES / name).rglob("*.yaml")]
    return {p: p.read_text() for p in sorted(paths) if p.is_file()}


def main() -> int:
    want: dict[Path, str] = {}
    for name, files in cases().items():
        want.update(goldens(name, render(files)))
    have = on_disk()
    for stale in sorted(set(have) - set(want)):
        stale.unlink()
        print(f"removed {stale.relative_to(ROOT)}")
    for d in sorted((p for p in TEMPLATES.rglob("*") if p.is_dir()), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    changed = 0
    for path, text in sorted(want.items()):
        if have.get(path) != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed += 1
            print(f"updated {path.relative_to(ROOT)}")
    print(f"{len(want)} golden files, {changed} updated; review with `git diff {GOLDEN.relative_to(ROOT)}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
