"""Validate rendered manifests against the Kubernetes OpenAPI schemas, offline.

Uses kubernetes-validate, which ships the JSON schemas of each Kubernetes minor
version inside the package (no network), in strict mode (unknown fields fail).
The same schemas, written out standalone in kubeconform's layout
(`standalone_schemas`), let the ecosystem's kubeconform check the same manifests
(`kubeconform`): two validators, one source of schemas. The gang schedulers' PodGroups
(scheduler-plugins, Volcano: their Go modules are refused here) and the Prometheus Operator's
PodMonitor and PrometheusRule are checked against their published CRDs, vendored in `crds/`,
with unknown fields refused as well.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

from . import TOOLS_BIN
from .errors import UsageError

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


# ----------------------------------------------------------------- custom resources

CRDS = Path(__file__).parent / "crds"  # vendored CRDs: gang PodGroups, Prometheus Operator objects (README there)


def _strict(node):
    """A CRD's structural schema as strict JSON Schema: an object that lists its properties and
    does not preserve unknown fields admits no others (the API server would prune them silently)."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if node.get("type") == "object" and "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    return out


@functools.cache
def crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> strict JSON Schema, from every CRD under CRDS."""
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for v in crd["spec"]["versions"]:
                schema = dict(_strict(v["schema"]["openAPIV3Schema"]))
                schema["properties"] = {**schema.get("properties", {}), "apiVersion": {"type": "string"}}
                schema["properties"]["kind"] = {"type": "string"}
                schema["properties"]["metadata"] = {"type": "object"}
                out[(f"{group}/{v['name']}", kind)] = schema
    return out


def validate_custom(doc: dict) -> list[Problem] | None:
    """Problems of a custom resource against its vendored CRD; None when no CRD is vendored for it."""
    schema = crd_schemas().get((doc.get("apiVersion", ""), doc.get("kind", "")))
    if schema is None:
        return None
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    return [Problem("CRD", resource_name(doc), ".".join(str(p) for p in e.path), e.message) for e in errors]


def supported_versions() -> list[str]:
    """The Kubernetes minors there are schemas for (kubernetes-validate's), oldest first."""
    from kubernetes_validate import utils

    found = {".".join(v.split(".")[:2]) for v in utils.all_versions()}
    return sorted(found, key=lambda v: tuple(int(x) for x in v.split(".")))


def validate_docs(docs: list[dict], versions=DEFAULT_VERSIONS) -> list[Problem]:
    known = supported_versions()
    unknown = [v for v in versions if ".".join(str(v).split(".")[:2]) not in known]
    if unknown:
        raise UsageError(
            f"--kube-version {', '.join(unknown)}: no schemas for it; give one of {known[0]} to {known[-1]}"
        )
    problems, builtin = [], []
    for doc in docs:
        custom = validate_custom(doc)
        if custom is None:
            builtin.append(doc)  # a Kubernetes kind: checked against each version's schemas below
        else:
            problems += custom
    docs = builtin
    for version in versions:
        for doc in docs:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                problems.append(Problem(version, resource_name(doc), ".".join(str(p) for p in e.path), e.message))
            except kubernetes_validate.SchemaNotFoundError as e:
                problems.append(Problem(version, resource_name(doc), "", e.message))
    return problems


# ----------------------------------------------------------------- kubeconform

SCHEMA_SOURCE = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
SCHEMA_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tf-cluster" / "kubeconform-schemas"
KUBECONFORM_LOCATION = (
    "{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json"
)
REF = re.compile(r"^(?:/api/_definitions\.json)?#/\$defs/(.+)$")


def newest_version() -> str:
    """The newest Kubernetes minor kubernetes-validate has schemas for, e.g. 1.37."""
    found = [m.groups() for d in SCHEMA_SOURCE.iterdir() if (m := re.match(r"^v(\d+)\.(\d+)\.0-local-strict$", d.name))]
    major, minor = max((int(a), int(b)) for a, b in found)
    return f"{major}.{minor}"


def schema_file_name(kind: str, api_version: str) -> str:
    """kubeconform's `{{ .ResourceKind }}{{ .KindSuffix }}.json`: job-batch-v1, networkpolicy-networking-v1, pod-v1."""
    group, _, version = api_version.rpartition("/")
    return f"{kind.lower()}{'-' + group.split('.')[0].lower() if group else ''}-{version.lower()}.json"


def standalone_schemas(version: str, kinds: set[tuple[str, str]], dest: Path = SCHEMA_CACHE) -> Path:
    """kubernetes-validate's strict schemas for (kind, apiVersion) pairs, each written standalone
    (the definitions it references copied in, `$ref`s made local) where kubeconform looks for them.
    Returns the root to pass as kubeconform's -schema-location prefix."""
    src = SCHEMA_SOURCE / f"v{version}.0-local-strict"
    out = dest / f"v{version}.0-standalone-strict"
    out.mkdir(parents=True, exist_ok=True)
    definitions = None
    for kind, api_version in sorted(kinds):
        name = schema_file_name(kind, api_version)
        if (out / name).exists() or not (src / name).exists():
            continue  # cached, or unknown here: kubeconform then reports the missing schema itself
        if definitions is None:
            definitions = json.loads((src / "_definitions.json").read_text())["$defs"]
        schema = json.loads((src / name).read_text())
        schema.pop("$id", None)  # its references are made local: no base to resolve against
        used: dict[str, dict] = {}
        standalone = _inline(schema, definitions, used)
        standalone["$defs"] = used
        tmp = out / f".{name}.tmp"
        tmp.write_text(json.dumps(standalone))
        tmp.replace(out / name)
    return dest


def _inline(node, definitions: dict, used: dict):
    """`node` with every reference to kubernetes-validate's shared definitions made local
    (`#/$defs/<name>`), the referenced definitions (transitively) collected into `used`."""
    if isinstance(node, list):
        return [_inline(v, definitions, used) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _inline(v, definitions, used) for k, v in node.items() if k != "$ref"}
    m = REF.match(node.get("$ref", ""))
    if m:
        name = m.group(1)
        if name not in used:
            used[name] = {}  # placeholder first: a definition may refer to itself
            used[name] = _inline(definitions[name], definitions, used)
        out["$ref"] = f"#/$defs/{name}"
    elif "$ref" in node:
        out["$ref"] = node["$ref"]
    return out


def kubeconform(text: str, version: str) -> subprocess.CompletedProcess:
    """kubeconform -strict over rendered manifests (YAML text), offline, for one Kubernetes minor."""
    kinds = {(d["kind"], d["apiVersion"]) for d in yaml.safe_load_all(text) if d}
    root = standalone_schemas(version, kinds)
    argv = [str(TOOLS_BIN / "kubeconform"), "-strict", "-summary", "-output", "text"]
    argv += ["-kubernetes-version", f"{version}.0", "-schema-location", f"{root}/{KUBECONFORM_LOCATION}", "-"]
    return subprocess.run(argv, input=text, capture_output=True, text=True)
