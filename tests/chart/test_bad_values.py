"""The bad-input corpus: every file under tests/bad-values is refused by `helm template`
with a message naming the offending value (each `# expect:` line), and nothing renders."""

from __future__ import annotations

from pathlib import Path

import pytest

from tf_cluster import ROOT, helm

CORPUS = sorted((ROOT / "tests" / "bad-values").glob("*.yaml"))


def expectations(path: Path) -> list[str]:
    return [ln.split(":", 1)[1].strip() for ln in path.read_text().splitlines() if ln.startswith("# expect:")]


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 30
    assert all(expectations(p) for p in CORPUS)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_bad_values_fail_with_a_message_naming_the_value(path, helm_major):
    proc = helm.Helm(helm_major).render("tf", helm.Values.of([path]))
    assert proc.returncode != 0, f"{path.name} rendered: {proc.stdout[:300]}"
    assert proc.stdout == "", "nothing may be rendered"
    for expected in expectations(path):
        assert expected in proc.stderr, f"{path.name}: {expected!r} not in {proc.stderr!r}"
