"""The launcher's identity: its protocol number (files/tf_cluster_launcher/__init__.py, PROTOCOL)
names what every pod runs, not its files' bytes. tests/launcher/protocols.json records, for each
protocol number released, the fingerprint of the launcher's code; a change to that code must come
with a new number.

The fingerprint is the launcher's code as Python runs it, wherever it lives: every top-level
definition of every module (and of launcher.py), as its syntax tree, with docstrings, comments,
layout and the package's own imports left out, and references through a sibling module
(`kubeapi.api`) read as the name (`api`), type annotations and imports for them (typing,
`if TYPE_CHECKING:`) left out too; the definitions sorted, plus the list of modules (each
is an item of every pod's launcher volume). So moving a function between modules, reformatting or
rewording a comment or docstring keeps it; changing any statement, constant, log message, API
path, environment name or exit code changes it. Renaming a local variable or splitting a function
also changes it: a conservative rule (a refactor of that kind bumps the number, renaming the Jobs
once), because telling those apart from behaviour needs more than the code's shape.

    python tests/launcher/protocol.py            check (what tests/launcher/test_protocol.py does)
    python tests/launcher/protocol.py --record   record the current PROTOCOL's fingerprint
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "charts" / "tf-cluster" / "files"
LOCK = Path(__file__).with_name("protocols.json")
PACKAGE = "tf_cluster_launcher"
TYPES_ONLY = ("typing", "__future__")  # imports that change what the type checker sees, not what runs


class Normalize(ast.NodeTransformer):
    """Docstrings out, the package's own imports out, `sibling.name` -> `name`."""

    def __init__(self, modules: set[str]) -> None:
        self.modules = modules

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        own = node.level > 0 or (node.module or "").split(".")[0] in (PACKAGE, *TYPES_ONLY)
        return None if own else node

    def visit_Import(self, node: ast.Import) -> ast.AST | None:
        return None if all(a.name.split(".")[0] in (PACKAGE, *TYPES_ONLY) for a in node.names) else node

    def visit_If(self, node: ast.If) -> ast.AST | None:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" and not node.orelse:
            return None  # imports for the type checker only
        self.generic_visit(node)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.returns = None
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        """`x: T = v` runs as `x = v`; a bare `x: T` does nothing."""
        if node.value is None:
            return None
        self.generic_visit(node)
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno), node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id in self.modules:
            return ast.copy_location(ast.Name(id=node.attr, ctx=node.ctx), node)
        self.generic_visit(node)
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and is_docstring(body[0]):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
        return super().generic_visit(node)


def is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def is_protocol(node: ast.AST) -> bool:
    return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PROTOCOL" for t in node.targets)


def fingerprint(files: Path = FILES) -> str:
    package = files / PACKAGE
    modules = sorted(p.stem for p in package.glob("*.py"))
    parts = []
    for path in [files / "launcher.py", *sorted(package.glob("*.py"))]:
        tree = Normalize(set(modules)).visit(ast.parse(path.read_text()))
        for node in tree.body:
            if not is_docstring(node) and not is_protocol(node):
                parts.append(ast.dump(node))
    text = "\n".join(["modules: " + " ".join(modules), *sorted(parts)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def protocol(files: Path = FILES) -> int:
    found = re.search(r"(?m)^PROTOCOL = ([0-9]+)$", (files / PACKAGE / "__init__.py").read_text())
    if not found:
        raise ValueError(f"{files / PACKAGE / '__init__.py'} declares no PROTOCOL = <number>")
    return int(found.group(1))


def problem(files: Path = FILES, lock: Path = LOCK) -> str | None:
    """Why the launcher's code and its protocol number disagree with the record, or None."""
    recorded: dict[str, str] = json.loads(lock.read_text())
    number, got = protocol(files), fingerprint(files)
    newest = max(int(k) for k in recorded)
    if str(number) not in recorded:
        if number != newest + 1:
            return f"PROTOCOL = {number}, but the last recorded is {newest}: the next is {newest + 1}"
        return f"PROTOCOL {number} is new: record it (python tests/launcher/protocol.py --record)"
    if recorded[str(number)] != got:
        return (
            f"the launcher's code changed (fingerprint {got}, protocol {number} was {recorded[str(number)]}) and "
            f"PROTOCOL did not: a change of behaviour renames the Jobs, so set PROTOCOL = {newest + 1} in "
            f"files/{PACKAGE}/__init__.py, say so in CHANGELOG.md, and record it "
            "(python tests/launcher/protocol.py --record)"
        )
    if number != newest:
        return f"PROTOCOL = {number}, but {newest} is recorded already: the launcher went back?"
    return None


def main(argv: list[str]) -> int:
    if argv[:1] == ["--record"]:
        recorded = json.loads(LOCK.read_text()) if LOCK.exists() else {}
        recorded[str(protocol())] = fingerprint()
        LOCK.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
        print(f"recorded protocol {protocol()}: {fingerprint()}")
        return 0
    why = problem()
    print(why or f"protocol {protocol()}: the launcher's code is the recorded one")
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
