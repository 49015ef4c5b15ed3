"""Pure logic over rendered manifests: which pods the chart makes, with what env.

No subprocess, no cluster: every function takes parsed YAML documents.
Kubernetes semantics reproduced here (and tested): an Indexed Job's pod i gets
the `batch.kubernetes.io/job-completion-index` annotation i and hostname
`<job>-<i>`; env entries are resolved in order, `$(VAR)` expanding to an
earlier variable (`$$` escapes), unknown references left as they are; a `configMapKeyRef` to a
rendered ConfigMap reads its data (the chart's TF_CONFIG is composed from one).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from . import roles

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
FAILURES_ANNOTATION = "batch.kubernetes.io/job-index-failure-count"  # the index's failures before this pod
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")  # what the API server accepts as one (IsEnvVarName)


class TFTask(TypedDict):
    """TF_CONFIG's `task`: this process's role and index in the cluster."""

    type: str
    index: int


class TFConfig(TypedDict, total=False):
    """The TF_CONFIG environment variable TensorFlow reads, as the chart and the TFJob controller set it
    (both always set `cluster` and `task`)."""

    cluster: dict[str, list[str]]  # role -> every task's host:port, in index order
    task: TFTask
    environment: str  # the TFJob controller's "cloud"; the chart sets none


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion (pkg third_party/forked/golang/expansion)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i] == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env[name] if name in env else text[i : end + 1])
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


_QUANTITY = re.compile(r"^([0-9.]+)(m?)$")


def cpu_quantity(value) -> float:
    m = _QUANTITY.match(str(value))
    if not m:
        raise ValueError(f"unsupported CPU quantity {value!r}")
    number = float(m.group(1))
    return number / 1000 if m.group(2) else number


@dataclass
class Pod:
    """One pod an Indexed Job of the chart would create, env resolved."""

    role: str
    index: int
    job: str
    hostname: str
    subdomain: str
    namespace: str
    command: list[str]
    args: list[str]
    env: dict[str, str]
    container: dict = field(repr=False)
    pod_spec: dict = field(repr=False)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def tf_config(self) -> TFConfig | None:
        raw = self.env.get("TF_CONFIG")
        if raw is None:
            return None
        cfg: TFConfig = json.loads(raw)
        return cfg

    @property
    def argv(self) -> list[str]:
        return self.command + self.args

    @property
    def ports(self) -> dict[str, int]:
        return {p.get("name", str(p["containerPort"])): p["containerPort"] for p in self.container.get("ports", [])}


def resolve_env(
    container: dict,
    *,
    index: int,
    namespace: str,
    node_cpus: int,
    config_maps: Mapping[str, dict] | None = None,
    live_field: Callable[[str], str | None] | None = None,
) -> dict[str, str]:
    """A container's environment as its kubelet gives it; `config_maps`: the ConfigMaps' data by name
    (the chart's run environment, TF_CLUSTER_SPEC among it, is one, given by `envFrom`); `live_field`:
    a live pod's value for a downward-API field path (None: resolved as for a rendered pod, below).

    The kubelet's order (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables): first every
    `envFrom` source in turn, a key in two sources taking the last one's value, values as they are
    (not expanded), a key that is no environment variable name skipped; then `env` in order, each
    entry replacing a name from `envFrom`, `$(VAR)` expanding to anything defined before it."""
    env = from_sources(container, config_maps or {})
    resources = container.get("resources") or {}
    for entry in container.get("env", []):
        name = entry["name"]
        if "value" in entry:
            env[name] = expand(str(entry["value"]), env)
            continue
        source = entry.get("valueFrom", {})
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            live = live_field(path) if live_field is not None else None
            if live is not None:
                env[name] = live
            elif path == f"metadata.annotations['{INDEX_ANNOTATION}']":
                env[name] = str(index)
            elif path == "metadata.namespace":
                env[name] = namespace
            elif path == f"metadata.annotations['{FAILURES_ANNOTATION}']":
                env[name] = "0"  # an index's first pod (run-local resolves each env once; its table counts restarts)
            elif path in ("metadata.name", "metadata.uid"):
                env[name] = ""  # no pod object here: the launcher then records no Kubernetes Events
            else:
                raise ValueError(f"env {name}: fieldRef {path} is not supported here")
        elif "resourceFieldRef" in source:
            ref = source["resourceFieldRef"]
            resource = ref["resource"]
            if resource not in ("limits.cpu", "requests.cpu"):
                raise ValueError(f"env {name}: resourceFieldRef {resource} is not supported here")
            divisor = cpu_quantity(ref.get("divisor", "1"))
            given = (resources.get(resource.split(".")[0]) or {}).get("cpu")
            # the downward API: an unset limit is the node's allocatable cores, an unset request 0 (-> 1)
            cpus = cpu_quantity(given) if given is not None else (node_cpus if resource == "limits.cpu" else 0)
            env[name] = str(max(1, math.ceil(cpus / divisor)))
        elif (
            "configMapKeyRef" in source
            and config_maps is not None
            and source["configMapKeyRef"].get("name") in config_maps
        ):
            ref = source["configMapKeyRef"]
            data = config_maps[ref["name"]]
            if ref.get("key") not in data:
                raise ValueError(f"env {name}: ConfigMap {ref['name']} has no key {ref.get('key')!r}")
            env[name] = str(data[ref["key"]])
        else:
            env[name] = ""  # secretKeyRef, or a ConfigMap not in these manifests: not known offline
    return env


def from_sources(container: dict, config_maps: Mapping[str, dict]) -> dict[str, str]:
    """What a container's `envFrom` gives it: each key of its ConfigMaps in `config_maps` (with the
    source's prefix), the last source's value for a key in two; a key that is no environment
    variable name skipped, as the kubelet does. A Secret, or a ConfigMap not in these manifests,
    is not known offline: nothing."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef") or {}
        prefix = source.get("prefix", "")
        for key, value in (config_maps.get(ref.get("name", "")) or {}).items():
            if ENV_NAME.fullmatch(prefix + key):
                env[prefix + key] = str(value)
    return env


def env_entries(container: dict, config_maps: Mapping[str, dict]) -> dict[str, dict]:
    """A container's env entries by name as its kubelet sees them, unresolved: what its `envFrom`
    gives as {name, value} entries, then its `env` entries over them (resolve_env's order; a
    downward-API entry stays a `valueFrom`)."""
    out = {name: {"name": name, "value": value} for name, value in from_sources(container, config_maps).items()}
    for entry in container.get("env") or []:
        out[entry["name"]] = entry
    return out


def jobs(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d.get("kind") == "Job"]


def config_maps(docs: list[dict]) -> dict[str, dict]:
    """The rendered ConfigMaps' data, by name."""
    return {d["metadata"]["name"]: d.get("data") or {} for d in docs if d.get("kind") == "ConfigMap"}


def pods(docs: list[dict], *, namespace: str = "default", node_cpus: int = 1) -> list[Pod]:
    """Every pod of every Indexed Job, chief first, then by role and index."""
    out = []
    maps = config_maps(docs)
    for job in jobs(docs):
        spec = job["spec"]
        if spec.get("completionMode") != "Indexed":
            continue
        pod_spec = spec["template"]["spec"]
        container = pod_spec["containers"][0]
        role = spec["template"]["metadata"]["labels"].get("app.kubernetes.io/component", "task")
        for i in range(int(spec["completions"])):
            env = resolve_env(container, index=i, namespace=namespace, node_cpus=node_cpus, config_maps=maps)
            out.append(
                Pod(
                    role=role,
                    index=i,
                    job=job["metadata"]["name"],
                    hostname=f"{job['metadata']['name']}-{i}",
                    subdomain=pod_spec.get("subdomain", ""),
                    namespace=namespace,
                    command=[expand(c, env) for c in container.get("command", [])],
                    args=[expand(a, env) for a in container.get("args", [])],
                    env=env,
                    container=container,
                    pod_spec=pod_spec,
                )
            )
    return sorted(out, key=lambda p: (roles.order(p.role), p.index))


def tf_config_table(pod_list: list[Pod]) -> str:
    """One row per pod: pod name, task, TF_CONFIG (index substituted)."""
    rows = [("POD", "TASK", "TF_CONFIG")]
    for p in pod_list:
        cfg = p.tf_config
        task = f"{cfg['task']['type']}:{cfg['task']['index']}" if cfg else "-"
        rows.append(
            (
                p.hostname,
                task,
                json.dumps(cfg, separators=(",", ":")) if cfg else "(unset: single-task release trains locally)",
            )
        )
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return "\n".join(f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows)
