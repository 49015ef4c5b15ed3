"""Validate rendered manifests against the Kubernetes OpenAPI schemas, offline.

Uses kubernetes-validate, which ships the JSON schemas of each Kubernetes minor
version inside the package (no network), in strict mode (unknown fields fail).
"""

from __future__ import annotations

from dataclasses import dataclass

import kubernetes_validate

DEFAULT_VERSIONS = ("1.29", "1.35")


@dataclass(frozen=True)
class Problem:
    version: str
    resource: str
    path: str
    message: str

    def __str__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"Kubernetes {self.version}: {self.resource}{where}: {self.message}"


def resource_name(doc: dict) -> str:
    return f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}"


def validate_docs(docs: list[dict], versions=DEFAULT_VERSIONS) -> list[Problem]:
    problems = []
    for version in versions:
        for doc in docs:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                problems.append(Problem(version, resource_name(doc), ".".join(str(p) for p in e.path), e.message))
            except kubernetes_validate.SchemaNotFoundError as e:
                problems.append(Problem(version, resource_name(doc), "", e.message))
    return problems
