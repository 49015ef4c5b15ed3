"""Kubeflow TFJob (kubeflow.org/v1) manifests as tf-cluster values.

`convert` maps one TFJob to chart values and a list of `Note`s: every field that has no
equivalent, or whose meaning changes, with what happens instead (nothing is dropped
silently). `tfjob_tf_config` is the TFJob controller's TF_CONFIG, transcribed from
kubeflow/training-operator v1.9.0 (`pkg/controller.v1/tensorflow/tensorflow.go`
genTFConfigJSONStr/genClusterSpec, `util.go` isDistributed, `tfjob_webhook.go`), so the
converted release's TF_CONFIG can be compared with it task by task (`compare`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from . import imageconfig, manifests, roles
from .errors import TfClusterError, yaml_problem

#: TFJob replica type (the defaulting webhook camel-cases any spelling) -> chart role.
ROLE_OF = {"chief": "chief", "master": "chief", "worker": "worker", "ps": "ps", "evaluator": "evaluator"}
TYPE_NAMES = "Chief, Master, Worker, PS, Evaluator"
TFJOB_PORT_NAME, TFJOB_PORT, TFJOB_CONTAINER = "tfjob-port", 2222, "tensorflow"
#: kubeflow/training-operator pkg/util/train/train_util.go: IsRetryableExitCode is `exitCode >= 128`.
PERMANENT_EXIT_CODES = list(range(1, 128))
ACCELERATOR = re.compile(r"^([a-z0-9.-]+/)?(gpu|tpu|neuron|neuroncore|[a-z0-9.-]*gpu[a-z0-9.-]*)$")
#: Storage slots of the chart, and the words in a volume's name or path that pick one.
SLOTS = {"logs": ("log", "tensorboard", "tfevent", "summar"), "data": ("data",), "checkpoints": ()}

#: Pod spec fields that carry over as they are (to roleDefaults, or per role when they differ).
POD_SETTINGS = (
    "nodeSelector",
    "tolerations",
    "affinity",
    "topologySpreadConstraints",
    "priorityClassName",
    "schedulerName",
)
#: Every pod spec field the converter reads; any other is noted as not carried over.
POD_KEYS = {
    "containers",
    "initContainers",
    "volumes",
    *POD_SETTINGS,
    "serviceAccountName",
    "imagePullSecrets",
    "securityContext",
    "restartPolicy",
}
CONTAINER_KEYS = {
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "env",
    "envFrom",
    "resources",
    "volumeMounts",
    "ports",
    "securityContext",
}


# what Kubernetes accepts as an object's name or namespace (a DNS subdomain): no '/', no '..' path
DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def count(value: Any, path: str) -> int:
    """A whole, non-negative number the manifest gives (as Kubernetes reads it), else ManifestError."""
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
        raise ManifestError(f"{path}: {value!r} is not a whole number of 0 or more")
    return int(value)


class ManifestError(TfClusterError):
    """A manifest from-tfjob cannot read or convert; the message names the field."""

    exit_code = 5


@dataclass(frozen=True)
class Note:
    """A TFJob field with no equivalent or a changed meaning, and what happens instead."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass
class Conversion:
    name: str
    namespace: str | None
    values: dict[str, Any]  # the chart values, as written to the values file
    notes: list[Note] = field(default_factory=list)
    tfjob: dict[str, Any] = field(default_factory=dict, repr=False)  # as read, replica types camel-cased


# ------------------------------------------------------------------ reading
def load(text: str, source: str = "<stdin>") -> list[dict]:
    """Every TFJob in a YAML stream: documents, or `kubectl get tfjob -o yaml`'s List."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        where, problem = yaml_problem(e)
        raise ManifestError(f"{source}:{' ' + where if where else ''} not readable YAML ({problem})") from None
    out = []
    for n, doc in enumerate(docs, 1):
        if not isinstance(doc, dict):
            raise ManifestError(f"{source} document {n}: a mapping (a Kubernetes object) expected, got {doc!r:.60}")
        items = doc.get("items") if doc.get("kind", "").endswith("List") else [doc]
        for i, item in enumerate(items or []):
            where = f"{source} document {n}" + (f" items[{i}]" if items is not None and doc is not item else "")
            kind, api = item.get("kind"), str(item.get("apiVersion", ""))
            if kind != "TFJob" or not api.startswith("kubeflow.org/"):
                raise ManifestError(
                    f"{where}: kind {kind!r} apiVersion {api!r} is not a TFJob (kind: TFJob, apiVersion: "
                    "kubeflow.org/v1); give only TFJob manifests"
                )
            out.append(item)
    if not out:
        raise ManifestError(f"{source}: no TFJob in it")
    return out


def replica_specs(tfjob: dict) -> dict[str, dict]:
    """tfReplicaSpecs keyed by chart role, checked as the TFJob webhook and the chart's role table do."""
    specs = (tfjob.get("spec") or {}).get("tfReplicaSpecs")
    if not isinstance(specs, dict) or not specs:
        raise ManifestError("spec.tfReplicaSpecs: required (a map of replica type to replica spec)")
    out: dict[str, dict] = {}
    by_role: dict[str, str] = {}
    for rtype, spec in specs.items():
        path = f"spec.tfReplicaSpecs.{rtype}"
        role = ROLE_OF.get(str(rtype).lower())
        if role is None:
            raise ManifestError(f"{path}: unknown replica type {rtype!r}; a TFJob has {TYPE_NAMES}")
        if role in by_role:
            raise ManifestError(
                f"{path}: {by_role[role]} and {rtype} are both given; a TFJob has at most one Chief or Master "
                "(they mean the same): keep one"
            )
        if not isinstance(spec, dict):
            raise ManifestError(f"{path}: a replica spec (replicas, restartPolicy, template) expected")
        replicas = spec.get("replicas", 1)
        if not isinstance(replicas, int) or replicas < 0:
            raise ManifestError(f"{path}.replicas: {replicas!r} is not a count of pods")
        limit = roles.BY_NAME[role].max_replicas
        if limit and replicas > limit:
            raise ManifestError(
                f"{path}.replicas: {replicas} {rtype} replicas; TensorFlow runs at most {limit} "
                f"({'one chief' if role == 'chief' else 'one evaluator'}): set it to {limit} and move the rest "
                "to Worker"
            )
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        if not any(c.get("name") == TFJOB_CONTAINER for c in containers):
            raise ManifestError(
                f"{path}.template.spec.containers: no container named {TFJOB_CONTAINER!r} (the TFJob controller "
                "requires one; it is the one tf-cluster runs)"
            )
        for i, c in enumerate(containers):
            if not c.get("image"):
                raise ManifestError(f"{path}.template.spec.containers[{i}].image: required")
        by_role[role] = str(rtype)
        out[role] = {**spec, "replicas": replicas, "_type": str(rtype)}
    return {r: out[r] for r in roles.NAMES if r in out}


# ------------------------------------------------------------------ converting
def images_without_command(tfjob: dict) -> dict[str, list[str]]:
    """Image -> the replica types (with replicas) whose tensorflow container sets no command: TFJob
    ran that image's ENTRYPOINT, which the converted values need as their command."""
    out: dict[str, list[str]] = {}
    for spec in replica_specs(tfjob).values():
        c = container_of(spec)
        if spec["replicas"] and not c.get("command"):
            out.setdefault(c["image"], []).append(spec["_type"])
    return out


def convert(
    tfjob: dict,
    *,
    entrypoint: list[str] | None = None,
    gang: str = "",
    images: Mapping[str, imageconfig.ImageConfig] | None = None,
) -> Conversion:
    """One TFJob as chart values. For containers that set no command (TFJob ran the image's
    ENTRYPOINT; the chart's launcher starts the command itself): `entrypoint`, the command to give
    them all (--entrypoint), else `images`, each image's ENTRYPOINT/CMD (imageconfig.lookup), run as
    Kubernetes runs them. `gang`: the gang mechanism for a schedulingPolicy (kubernetes, volcano,
    coscheduling; default: volcano when a queue is named, else the Kubernetes PodGroup)."""
    meta = tfjob.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name:
        raise ManifestError("metadata.name: required")
    for key, value in (("name", name), ("namespace", meta.get("namespace"))):
        if value is not None and not DNS_NAME.fullmatch(str(value)):  # they also name the output files
            raise ManifestError(
                f"metadata.{key}: {str(value)!r} is not a Kubernetes name (lowercase letters, digits, '-' and '.')"
            )
    specs = replica_specs(tfjob)
    spec = tfjob.get("spec") or {}
    conv = Conversion(name, meta.get("namespace"), {}, tfjob=tfjob)
    note = conv.notes.append

    def say(path: str, message: str) -> None:
        note(Note(path, message))

    v = conv.values
    v["fullnameOverride"] = name
    counts = {role: s["replicas"] for role, s in specs.items()}
    v["strategy"] = strategy(counts, say)
    v["roles"] = {role: {"replicas": counts.get(role, 0)} for role in roles.NAMES}

    if not any(counts.values()):
        raise ManifestError("spec.tfReplicaSpecs: every replica type has replicas: 0; nothing would run")
    for role, n in counts.items():
        if not n:
            say(f"spec.tfReplicaSpecs.{specs[role]['_type']}", "replicas: 0: the role is left out")
    specs = {role: s for role, s in specs.items() if counts[role]}
    per_role = {role: pod_settings(s, say, None if entrypoint else images) for role, s in specs.items()}
    hoist(v, per_role, specs, say, entrypoint)
    extensions(v, specs, storage(v, specs, say), say)
    restart_policies(v, specs, spec.get("runPolicy") or {}, say)
    run_policy(v, spec.get("runPolicy") or {}, counts, say, gang)
    success_policy(spec, counts, say)
    if spec.get("enableDynamicWorker"):
        say(
            "spec.enableDynamicWorker",
            "no equivalent: every task gets the whole cluster in TF_CONFIG (no sparse cluster spec)",
        )
    for key in sorted(set(spec) - {"tfReplicaSpecs", "runPolicy", "successPolicy", "enableDynamicWorker"}):
        say(f"spec.{key}", "no equivalent in tf-cluster: not carried over")
    if is_distributed(counts) and training_tasks(counts) == 1:
        v["tfConfig"] = {"alwaysSet": True}
        say(
            "tfConfig.alwaysSet",
            "set to true: the TFJob controller gives TF_CONFIG to a single training task when an evaluator "
            "is present; tf-cluster would leave it out",
        )
    if "master" in {str(s["_type"]).lower() for s in specs.values()}:
        say(
            f"spec.tfReplicaSpecs.{specs['chief']['_type']}",
            "Master becomes the chief role: its TF_CONFIG task type is 'chief', not 'master' (TF 2 treats "
            "both as the chief)",
        )
    if "evaluator" in counts and counts["evaluator"]:
        say(
            f"spec.tfReplicaSpecs.{specs['evaluator']['_type']}",
            "the evaluator is not listed in TF_CONFIG's cluster (TensorFlow's own rule: it is not part of the "
            "training cluster) and runs no gRPC server; it is stopped once the leading Job completes",
        )
    return conv


def strategy(counts: dict[str, int], say) -> str:
    if counts.get("ps"):
        if counts.get("chief"):
            return "parameterServer"
        say(
            "spec.tfReplicaSpecs.PS",
            "PS without a Chief: strategy 'custom' (TF1 between-graph; worker 0 leads); ParameterServerStrategy "
            "needs a chief (its coordinator)",
        )
        return "custom"
    return "multiWorkerMirrored"


def container_of(spec: dict) -> dict:
    return next(c for c in spec["template"]["spec"]["containers"] if c.get("name") == TFJOB_CONTAINER)


def pod_settings(spec: dict, say, images: Mapping[str, imageconfig.ImageConfig] | None = None) -> dict:
    """What one replica type's pod template asks for, in the chart's terms (before hoisting). `images`:
    the ENTRYPOINT/CMD of images whose container sets no command (the command Kubernetes ran)."""
    path = f"spec.tfReplicaSpecs.{spec['_type']}.template"
    tmpl = spec.get("template") or {}
    pod = tmpl.get("spec") or {}
    c = container_of(spec)
    out: dict = {"image": c["image"]}
    for key in ("imagePullPolicy", "command", "args", "env", "envFrom"):
        if c.get(key):
            out[key] = c[key]
    config = (images or {}).get(c["image"])
    if config is not None and not c.get("command"):
        out["command"], args = config.command(c.get("args") or [])
        out.pop("args", None)
        if args:
            out["args"] = args
        out[COMMAND_FROM] = config
    resources = dict(c.get("resources") or {})
    gpus: dict = {}
    for kind in ("limits", "requests"):
        for res in [r for r in (resources.get(kind) or {}) if ACCELERATOR.match(r)]:
            gpus[res] = count(resources[kind][res], f"{path}.spec.containers[tensorflow].resources.{kind}.{res}")
            resources[kind] = {k: x for k, x in resources[kind].items() if k != res}
    out["resources"] = {k: x for k, x in resources.items() if x}
    out["gpus"] = gpus
    for key in POD_SETTINGS:
        if pod.get(key):
            out[key] = pod[key]
    meta = tmpl.get("metadata") or {}
    if meta.get("labels"):
        out["podLabels"] = meta["labels"]
    if meta.get("annotations"):
        out["podAnnotations"] = meta["annotations"]
    for key in ("serviceAccountName", "imagePullSecrets", "securityContext"):
        if pod.get(key):
            out["pod." + key] = pod[key]
    if c.get("securityContext"):
        out["container.securityContext"] = c["securityContext"]
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    out["port"] = ports.get(TFJOB_PORT_NAME, TFJOB_PORT)
    not_carried_over(path, pod, c, ports, say)
    return out


def not_carried_over(path: str, pod: dict, c: dict, ports: dict, say) -> None:
    """Notes for the pod template's ports, containers and fields the chart has no place for."""
    for pname in sorted(str(k) for k in ports if k != TFJOB_PORT_NAME):
        say(
            f"{path}.spec.containers[tensorflow].ports[{pname}]",
            "not carried over: the chart opens only the TF port (and TensorBoard's)",
        )
    for key in sorted(set(c) - CONTAINER_KEYS):
        say(f"{path}.spec.containers[tensorflow].{key}", "no equivalent in tf-cluster: not carried over")
    for key in sorted(set(pod) - POD_KEYS):
        say(f"{path}.spec.{key}", "no equivalent in tf-cluster: not carried over")


TOP_LEVEL = ("command", "args", "env", "envFrom")
ROLE_DEFAULTS = ("resources", "gpus", *POD_SETTINGS, "podLabels", "podAnnotations")
#: pod_settings' key for the ImageConfig a role's command was read from (when its container set none).
COMMAND_FROM = "command from image"


def shared(per_role: dict[str, dict], key: str) -> bool:
    """Every replica type has the same value (or none) for `key`."""
    return len({json.dumps(s.get(key), sort_keys=True) for s in per_role.values()}) == 1


def hoist(v: dict, per_role: dict[str, dict], specs: dict[str, dict], say, entrypoint: list[str] | None) -> None:
    """Settings every replica type shares go to the top level or roleDefaults, set once; the rest per role."""
    present = list(per_role)
    hoist_image(v, per_role, specs, say)
    for key in TOP_LEVEL:
        if shared(per_role, key):
            if per_role[present[0]].get(key):
                v[key] = per_role[present[0]][key]
        else:
            for r in present:
                v["roles"][r][key] = per_role[r].get(key) or []
    hoist_command(v, per_role, specs, say, entrypoint)
    for key in ROLE_DEFAULTS:
        if shared(per_role, key):
            if per_role[present[0]].get(key):
                v.setdefault("roleDefaults", {})[key] = per_role[present[0]][key]
        else:
            for r in present:
                if per_role[r].get(key):
                    v["roles"][r][key] = per_role[r][key]
    ports = {per_role[r]["port"] for r in present}
    v["port"] = per_role[present[0]]["port"]
    if len(ports) > 1:
        say(
            "ports[tfjob-port]",
            f"differs between replica types ({sorted(ports)}): tf-cluster has one port, every task uses {v['port']} "
            "(programs that read TF_CONFIG follow it)",
        )
    hoist_account(v, per_role, say)
    hoist_security(v, per_role, say)


def hoist_image(v: dict, per_role: dict[str, dict], specs: dict[str, dict], say) -> None:
    """image: repository[:tag][@digest] -> image.repository / image.tag, per role where it differs."""
    present = list(per_role)
    images = {r: split_image(per_role[r]["image"]) for r in present}
    first = images[present[0]]
    v["image"] = dict(first)
    pulls = {str(per_role[r]["imagePullPolicy"]) for r in present if per_role[r].get("imagePullPolicy")}
    if pulls:
        v["image"]["pullPolicy"] = sorted(pulls)[0]
        if len(pulls) > 1:
            say("imagePullPolicy", f"differs between replica types ({sorted(pulls)}): all use {sorted(pulls)[0]}")
    for r in present[1:]:
        if images[r] != first:
            v["roles"][r]["image"] = dict(images[r])
            if ("digest" in images[r]) != ("digest" in first):
                say(
                    f"spec.tfReplicaSpecs.{specs[r]['_type']}...image",
                    "one replica type's image is pinned by digest and another by tag: a role's image settings "
                    "are merged over image.*, so pin both the same way",
                )


def hoist_command(
    v: dict, per_role: dict[str, dict], specs: dict[str, dict], say, entrypoint: list[str] | None
) -> None:
    """A container with no command ran its image's ENTRYPOINT: the one read from the image (pod_settings),
    else --entrypoint's; with neither the values say so (and helm refuses them)."""
    present = list(per_role)
    by_image: dict[str, list[str]] = {}
    for r in present:
        if per_role[r].get(COMMAND_FROM):
            by_image.setdefault(per_role[r]["image"], []).append(r)
    for image, from_image in by_image.items():
        config: imageconfig.ImageConfig = per_role[from_image[0]][COMMAND_FROM]
        say(
            "containers[tensorflow].command",
            f"not set for {', '.join(specs[r]['_type'] for r in from_image)}: TFJob ran the image's ENTRYPOINT "
            f"(then CMD, unless the container gives args): {image}: {config.describe()}",
        )
    if "command" in v or all(v["roles"][r].get("command") for r in present):
        return
    if entrypoint:
        v["command"] = list(entrypoint)
        return
    v["command"] = []
    roles_without = [specs[r]["_type"] for r in present if not per_role[r].get("command")]
    say(
        "containers[tensorflow].command",
        f"not set for {', '.join(roles_without)}: TFJob ran the image's ENTRYPOINT; tf-cluster's launcher "
        "starts the command itself, so give it: from-tfjob --entrypoint 'python /path/train.py' (`tf-cluster "
        "from-tfjob` reads it from the image itself when it can). The values leave command empty, which helm "
        "refuses until it is set",
    )


def hoist_account(v: dict, per_role: dict[str, dict], say) -> None:
    """serviceAccountName and imagePullSecrets: one of each per release."""
    accounts = {str(s.get("pod.serviceAccountName") or "") for s in per_role.values()}
    if "default" in accounts:
        say(
            "serviceAccountName",
            "default: not carried over; the release runs as its own account (serviceAccount.create), because the "
            "chart would otherwise grant the namespace's `default` account, so every pod running as it, the "
            "launcher's Role (list and watch pods, mark a pod Failed)",
        )
    if accounts - {"", "default"}:
        account = sorted(accounts - {"", "default"})[0]
        v["serviceAccount"] = {"create": False, "name": account, "shareGrants": True}
        if len(accounts - {""}) > 1:
            say("serviceAccountName", f"differs between replica types: one service account per release, {account}")
        say(
            "serviceAccountName",
            f"{account} must exist. The release grants it (serviceAccount.shareGrants) the launcher's Role: list "
            "and watch the namespace's pods and EndpointSlices, get the leading Job and, when fencing, mark a pod "
            f"Failed; every pod running as {account} holds those rights. To keep them to this release, drop "
            "serviceAccount from the values (the release's own account) and give that one your account's other "
            "permissions",
        )
    secrets = []
    for s in per_role.values():
        for secret in s.get("pod.imagePullSecrets") or []:
            if secret not in secrets:
                secrets.append(secret)
    if secrets:
        v["imagePullSecrets"] = secrets


def hoist_security(v: dict, per_role: dict[str, dict], say) -> None:
    contexts = (("pod.securityContext", "podSecurityContext"), ("container.securityContext", "securityContext"))
    for key, value_key in contexts:
        given = [s.get(key) for s in per_role.values() if s.get(key)]
        if given:
            # Helm merges maps key by key: the chart's restricted defaults the TFJob does not set are
            # removed (null), so runAsUser: 0 does not meet runAsNonRoot: true.
            v[value_key] = {**{k: None for k in CHART_SECURITY[value_key]}, **(given[0] or {})}
            if not shared(per_role, key):
                say(key.split(".")[0] + ".securityContext", f"differs between replica types: all use {given[0]}")
    if "podSecurityContext" not in v and "securityContext" not in v:
        say(
            "securityContext",
            "not set in the TFJob (the image's user, a writable root filesystem): tf-cluster runs as uid 1000 "
            "with a read-only root filesystem (/tmp and the volumes writable). If the image needs root or writes "
            "elsewhere, set podSecurityContext / securityContext",
        )


#: The chart's default security settings (values.yaml), replaced whole when a TFJob sets its own.
CHART_SECURITY = {
    "podSecurityContext": ("runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "seccompProfile"),
    "securityContext": ("allowPrivilegeEscalation", "readOnlyRootFilesystem", "capabilities"),
}


def split_image(ref: str) -> dict:
    """image.repository and tag, or digest for a reference pinned by content (`repo@sha256:...`)."""
    if "@" in ref:
        repo, _, digest = ref.partition("@")
        return {"repository": repo.rsplit(":", 1)[0] if ":" in repo.rsplit("/", 1)[-1] else repo, "digest": digest}
    repo, _, tag = ref.rpartition(":")
    if not repo or "/" in tag:
        return {"repository": ref, "tag": "latest"}
    return {"repository": repo, "tag": tag}


def slot_for(name: str, mount_path: str, free: list[str]) -> str | None:
    text = f"{name} {mount_path}".lower()
    for slot, words in SLOTS.items():
        if slot in free and any(w in text for w in words):
            return slot
    for preferred in ("checkpoints", "data", "logs"):
        if preferred in free:
            return preferred
    return None


def storage(v: dict, specs: dict[str, dict], say) -> dict[str, str]:
    """Volumes mounted into the tensorflow container -> the chart's three storage slots (release-wide).
    Returns where each placed volume went (its name -> the chart's volume name); the others are
    extensions()'s."""
    free = list(SLOTS)
    placed: dict[str, tuple[str, str]] = {}  # volume name -> (slot, mountPath)
    for spec in specs.values():
        path = f"spec.tfReplicaSpecs.{spec['_type']}.template.spec"
        pod = spec["template"]["spec"]
        volumes = {vol.get("name"): vol for vol in pod.get("volumes") or []}
        for m in container_of(spec).get("volumeMounts") or []:
            vname, mpath = m.get("name"), m.get("mountPath")
            vol = volumes.get(vname)
            where = f"{path}.volumes[{vname}]"
            if vol is None:
                raise ManifestError(f"{path}.containers[tensorflow].volumeMounts[{vname}]: no volume named {vname!r}")
            if vname in placed:
                if placed[vname][1] != mpath:
                    say(where, f"mounted at {mpath} here and {placed[vname][1]} elsewhere: every task uses the latter")
                continue
            if m.get("subPath"):
                say(f"{where}.subPath", "no equivalent: the whole volume is mounted")
            if "emptyDir" in vol and mpath in ("/tmp", "/dev/shm"):
                placed[vname] = (scratch(v, vol, mpath, where, say), mpath)
                continue
            kind = next((k for k in ("persistentVolumeClaim", "emptyDir") if k in vol), "")
            slot = slot_for(vname, mpath, free) if kind else None
            if slot is None:  # a Secret, ConfigMap, CSI... volume, or a fourth claim: an extra volume
                continue
            free.remove(slot)
            placed[vname] = (slot, mpath)
            v.setdefault("storage", {})[slot] = storage_slot(vol, m, slot, where, say)
    mounts = [
        sorted((m.get("name"), m.get("mountPath")) for m in container_of(s).get("volumeMounts") or [])
        for s in specs.values()
    ]
    if any(m != mounts[0] for m in mounts):
        say("volumeMounts", "differ between replica types: tf-cluster mounts the same volumes in every task")
    for vname, (slot, mpath) in placed.items():
        if slot in SLOTS:
            say(f"volumes[{vname}]", f"-> storage.{slot} at {mpath} (the chart's MODEL_DIR/DATA_DIR/LOG_DIR follow it)")
    return {vname: "dshm" if slot == "shm" else slot for vname, (slot, _) in placed.items()}


#: the pod volumes the chart names itself (_storage.tpl): an extra volume of that name is renamed
CHART_VOLUMES = ("tmp", "launcher", "data", "checkpoints", "logs", "code", "dshm")


def extensions(v: dict, specs: dict[str, dict], placed: dict[str, str], say) -> None:
    """What the chart's storage slots do not hold -> the pod extensions: the tensorflow container's
    other volumes (extraVolumes, extraVolumeMounts), the pod's other containers (native sidecars)
    and its init containers, per replica type; set once in roleDefaults when every type has the
    same. Volume names follow the chart's: a volume placed in a slot is referred to by the slot's
    name, an extra one named like one of the chart's is renamed `tfjob-<name>`."""
    per_role: dict[str, dict] = {}
    for role, spec in specs.items():
        path = f"spec.tfReplicaSpecs.{spec['_type']}.template.spec"
        pod = spec["template"]["spec"]
        tf = container_of(spec)
        volumes = {vol.get("name"): vol for vol in pod.get("volumes") or []}
        rename = {n: (f"tfjob-{n}" if n in CHART_VOLUMES else n) for n in volumes if n not in placed} | placed

        def moved(c: dict, rename: dict[str, str] = rename) -> dict:
            c = json.loads(json.dumps(c))
            for m in c.get("volumeMounts") or []:
                m["name"] = rename.get(m.get("name"), m.get("name"))
            return c

        sidecars = [moved(c) for c in pod.get("containers") or [] if c is not tf]
        inits = [moved(c) for c in pod.get("initContainers") or []]
        sidecars += [c for c in inits if c.get("restartPolicy") == "Always"]
        inits = [c for c in inits if c.get("restartPolicy") != "Always"]
        tf_mounts = [
            m
            for m in moved({"volumeMounts": tf.get("volumeMounts") or []})["volumeMounts"]
            if m["name"] not in placed.values()
        ]
        used = {m["name"] for c in (*sidecars, *inits) for m in c.get("volumeMounts") or []} | {
            m["name"] for m in tf_mounts
        }
        extra = [dict(vol, name=rename[n]) for n, vol in volumes.items() if n not in placed and rename[n] in used]
        for n in sorted(set(volumes) - set(placed)):
            if rename[n] not in used:
                say(f"{path}.volumes[{n}]", "mounted by no container: not carried over")
            else:
                kind = "/".join(sorted(set(volumes[n]) - {"name"}))
                to = f" as {rename[n]} (the chart has a volume named {n})" if rename[n] != n else ""
                say(f"{path}.volumes[{n}]", f"a {kind} volume -> extraVolumes{to}")
        for c in sidecars:
            say(
                f"{path}.containers[{c.get('name')}]",
                "-> sidecars: a Kubernetes native sidecar, started before the training container and stopped "
                "when it ends (so it never keeps a finished task's pod running, as under TFJob)",
            )
        for c in inits:
            say(f"{path}.initContainers[{c.get('name')}]", "-> initContainers, in the same order")
        per_role[role] = {
            "extraVolumes": extra,
            "extraVolumeMounts": tf_mounts,
            "sidecars": [{k: x for k, x in c.items() if k != "restartPolicy"} for c in sidecars],
            "initContainers": inits,
        }
    for key in ("extraVolumes", "extraVolumeMounts", "initContainers", "sidecars"):
        if shared(per_role, key):
            if per_role[next(iter(per_role))][key]:
                v.setdefault("roleDefaults", {})[key] = per_role[next(iter(per_role))][key]
        else:
            for role, got in per_role.items():
                if got[key]:
                    v["roles"][role][key] = got[key]


def scratch(v: dict, vol: dict, mpath: str, where: str, say) -> str:
    """An emptyDir at /tmp or /dev/shm -> storage.tmp.sizeLimit or shmSize; its slot name."""
    size = (vol.get("emptyDir") or {}).get("sizeLimit")
    if mpath == "/tmp":
        v.setdefault("storage", {})["tmp"] = {"sizeLimit": size or ""}
        say(where, f"emptyDir at /tmp -> storage.tmp.sizeLimit {size or '(none)'}: every pod has its own /tmp")
        return "tmp"
    v["shmSize"] = size or "1Gi"
    say(where, f"emptyDir at /dev/shm -> shmSize {v['shmSize']} (a memory-backed /dev/shm)")
    return "shm"


def storage_slot(vol: dict, mount: dict, slot: str, where: str, say) -> dict:
    """A claim or an emptyDir mounted at `mount` as the chart's storage.<slot>."""
    mpath = mount.get("mountPath")
    entry: dict = {"mountPath": mpath}
    if "persistentVolumeClaim" in vol:
        entry.update(type="existingClaim", existingClaim=vol["persistentVolumeClaim"]["claimName"])
    else:
        entry["type"] = "emptyDir"
        if (vol.get("emptyDir") or {}).get("sizeLimit"):
            entry["size"] = vol["emptyDir"]["sizeLimit"]
        say(where, f"emptyDir at {mpath} -> storage.{slot} (type emptyDir): each pod has its own, as under TFJob")
    if mount.get("readOnly") or (vol.get("persistentVolumeClaim") or {}).get("readOnly"):
        entry["readOnly"] = True
    return entry


def restart_policies(v: dict, specs: dict[str, dict], run: dict, say) -> None:
    policies: dict[str, dict] = {}
    for role, spec in specs.items():
        path = f"spec.tfReplicaSpecs.{spec['_type']}.restartPolicy"
        policy = spec.get("restartPolicy") or "Never"
        if policy == "Never":
            policies[role] = {"backoffLimitPerIndex": 0}
            say(
                path,
                f"Never -> jobPolicies.{role}.backoffLimitPerIndex 0: a failed pod fails the run, as under TFJob "
                "(drop it to get tf-cluster's default of 3 retries per task)",
            )
        elif policy in ("OnFailure", "Always"):
            limit = run.get("backoffLimit")
            if limit is not None:
                policies[role] = {"backoffLimitPerIndex": count(limit, "spec.runPolicy.backoffLimit")}
            say(
                path,
                f"{policy} -> retried up to job.backoffLimitPerIndex times per task: a failed task gets a new pod "
                "(its container is not restarted in place); checkpoints on a claim carry over"
                + ("; Always: a task that exits 0 is done (a Job does not restart it)" if policy == "Always" else ""),
            )
        elif policy == "ExitCode":
            # 42 included, TensorFlow's restart code after a preemption save, which the chart restarts by
            # default (job.restartExitCodes): the training operator fails the run on it
            policies[role] = {"nonRetryableExitCodes": PERMANENT_EXIT_CODES, "restartExitCodes": []}
            say(
                path,
                f"ExitCode -> jobPolicies.{role}.nonRetryableExitCodes 1-127: exit codes 1-127 fail the run at "
                "once, 128 and above (signals: OOM kill, preemption) are retried, as in the training operator; "
                f"42 too (jobPolicies.{role}.restartExitCodes []), which tf-cluster otherwise restarts without "
                "counting: TensorFlow's PreemptionCheckpointHandler exits 42 after saving",
            )
        else:
            raise ManifestError(f"{path}: {policy!r} is not one of Never, OnFailure, ExitCode, Always")
    if policies:
        v["jobPolicies"] = policies


def run_policy(v: dict, run: dict, counts: dict[str, int], say, gang: str) -> None:
    job: dict = {}
    clean = run.get("cleanPodPolicy", "None")
    if clean in ("None", "Running"):
        say(
            "spec.runPolicy.cleanPodPolicy",
            f"{clean}: tf-cluster deletes no pods when the run ends, and leaves none running: the launcher stops "
            "ps and evaluator tasks once the leading Job completes (their pods end Succeeded)",
        )
    elif clean == "All":
        say(
            "spec.runPolicy.cleanPodPolicy",
            "All: no equivalent; finished pods stay until `helm uninstall` or job.ttlSecondsAfterFinished deletes "
            "the Jobs with their pods",
        )
    if run.get("backoffLimit") is not None:
        job["backoffLimitPerIndex"] = count(run["backoffLimit"], "spec.runPolicy.backoffLimit")
        say(
            "spec.runPolicy.backoffLimit",
            f"-> job.backoffLimitPerIndex {run['backoffLimit']}: counted per task (each index), not for the whole job",
        )
    if run.get("activeDeadlineSeconds") is not None:
        job["activeDeadlineSeconds"] = count(run["activeDeadlineSeconds"], "spec.runPolicy.activeDeadlineSeconds")
        say("spec.runPolicy.activeDeadlineSeconds", "-> job.activeDeadlineSeconds: each role's Job, from its own start")
    if run.get("ttlSecondsAfterFinished") is not None:
        job["ttlSecondsAfterFinished"] = count(run["ttlSecondsAfterFinished"], "spec.runPolicy.ttlSecondsAfterFinished")
        say(
            "spec.runPolicy.ttlSecondsAfterFinished",
            "-> job.ttlSecondsAfterFinished: deletes each finished Job. Under Argo CD a deleted Job is drift: "
            "self-heal re-creates it and trains again (tf-cluster docs upgrades-argocd)",
        )
    if job:
        v["job"] = job
    sched = run.get("schedulingPolicy") or {}
    if sched:
        scheduling_policy(v, sched, counts, say, gang)
    for key in sorted(
        set(run)
        - {"cleanPodPolicy", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished", "schedulingPolicy"}
    ):
        say(f"spec.runPolicy.{key}", "no equivalent in tf-cluster: not carried over")


def scheduling_policy(v: dict, sched: dict, counts: dict[str, int], say, gang: str) -> None:
    path = "spec.runPolicy.schedulingPolicy"
    scheduler = (v.get("roleDefaults") or {}).get("schedulerName", "")
    by_scheduler = {"volcano": "volcano", "scheduler-plugins-scheduler": "coscheduling"}
    mechanism = gang or by_scheduler.get(scheduler) or ("volcano" if sched.get("queue") else "kubernetes")
    if mechanism not in ("kubernetes", "volcano", "coscheduling"):
        raise ManifestError(f"--gang {gang!r}: kubernetes, volcano or coscheduling")
    s: dict = {}
    if mechanism == "kubernetes":
        s["gang"] = "auto"
        say(
            f"{path}",
            "the Kubernetes PodGroup (scheduling.gang auto) gangs the tasks where the cluster serves it (1.37+ "
            "with the gang API on); elsewhere nothing is ganged: use --gang volcano or coscheduling for those",
        )
    else:
        s["podGroup"] = mechanism  # the chart then sets that scheduler's schedulerName on every task
        if by_scheduler.get(scheduler) == mechanism:
            del v["roleDefaults"]["schedulerName"]
    gang_tasks = sum(n for r, n in counts.items() if roles.BY_NAME[r].in_gang)
    if "minAvailable" in sched and sched["minAvailable"] != gang_tasks:
        say(
            f"{path}.minAvailable",
            f"{sched['minAvailable']}: tf-cluster gangs every training task ({gang_tasks}: chief, workers, ps; not "
            "the evaluator), all or nothing",
        )
    if sched.get("queue"):
        if mechanism == "volcano":
            s["volcanoQueue"] = sched["queue"]
        else:
            say(f"{path}.queue", f"a Volcano queue; not used by the {mechanism} gang (use --gang volcano)")
    if sched.get("scheduleTimeoutSeconds") is not None:
        s["scheduleTimeoutSeconds"] = count(sched["scheduleTimeoutSeconds"], f"{path}.scheduleTimeoutSeconds")
    if sched.get("priorityClass"):
        v.setdefault("roleDefaults", {})["priorityClassName"] = sched["priorityClass"]
        say(f"{path}.priorityClass", "-> roleDefaults.priorityClassName (every task, and the gang)")
    if sched.get("minResources"):
        say(f"{path}.minResources", "no equivalent: the gang waits for the tasks' own requests")
    v["scheduling"] = s
    say(path, f"-> scheduling: {s} (tf-cluster docs gang-scheduling)")


def success_policy(spec: dict, counts: dict[str, int], say) -> None:
    policy = spec.get("successPolicy") or ""
    workers = counts.get("worker", 0)
    if counts.get("chief"):
        if policy == "AllWorkers":
            say("spec.successPolicy", "AllWorkers: the run completes when the chief does (the chart's leader)")
    elif workers > 1 and policy != "AllWorkers":
        say(
            "spec.successPolicy",
            "default: the run completes when every worker completes (TFJob: when worker 0 does); "
            "MultiWorkerMirrored workers finish together",
        )
    if policy not in ("", "AllWorkers"):
        raise ManifestError(f"spec.successPolicy: {policy!r} is not '' or 'AllWorkers'")


def training_tasks(counts: dict[str, int]) -> int:
    return sum(n for r, n in counts.items() if roles.BY_NAME[r].in_cluster)


# ------------------------------------------------------------------ writing
HEADER = """\
# tf-cluster values converted from TFJob {ns}{name} by `tf-cluster from-tfjob`.
# Install:  helm install {name} "$(tf-cluster chart path)" -f THIS_FILE{ns_flag}
# What changed or has no equivalent was printed by the converter; each line is
# repeated at the end of this file. `tf-cluster docs from-tfjob` has the whole table.
"""

COMMENTS = {
    "fullnameOverride": "Object names start with the TFJob's name: <name>-<role>-<run>-<index> pods.",
    "strategy": "Implied by the replica types: PS with a Chief -> parameterServer, no PS -> multiWorkerMirrored.",
    "roles": "tfReplicaSpecs: Chief/Master -> chief, Worker -> worker, PS -> ps, Evaluator -> evaluator.",
    "image": "The tensorflow container's image.",
    "command": "The tensorflow container's command (run by the chart's launcher).",
    "storage": "Volumes mounted into the tensorflow container (claims and emptyDirs).",
    "jobPolicies": "restartPolicy per replica type.",
    "job": "runPolicy.",
    "scheduling": "runPolicy.schedulingPolicy.",
    "roleDefaults": "Pod settings every replica type shares, set once.",
}


def to_yaml(conv: Conversion) -> str:
    ns = f"{conv.namespace}/" if conv.namespace else ""
    out = [HEADER.format(ns=ns, name=conv.name, ns_flag=f" -n {conv.namespace}" if conv.namespace else "")]
    for key, value in conv.values.items():
        if key in COMMENTS:
            out.append(f"# {COMMENTS[key]}\n")
        out.append(yaml.safe_dump({key: value}, sort_keys=False, default_flow_style=False, width=100))
    if conv.notes:
        out.append("\n# Converter notes (TFJob field: what happens instead):\n")
        out.extend(f"#   {n}\n" for n in conv.notes)
    return "".join(out)


# ------------------------------------------------------------------ TFJob's own TF_CONFIG
def is_distributed(counts: dict[str, int]) -> bool:
    """util.go isDistributed: TF_CONFIG is set unless the TFJob has exactly one replica in all."""
    return sum(counts.values()) != 1


def tfjob_tf_config(tfjob: dict, rtype: str, index: int) -> manifests.TFConfig | None:
    """TF_CONFIG the TFJob controller gives task `rtype:index` (rtype as in the manifest)."""
    specs = (tfjob.get("spec") or {})["tfReplicaSpecs"]
    if not is_distributed({t: s.get("replicas", 1) for t, s in specs.items()}):
        return None
    meta = tfjob["metadata"]
    cluster: dict[str, list[str]] = {}
    for t, s in specs.items():  # genClusterSpec: every replica type, the evaluator too
        c = next(c for c in s["template"]["spec"]["containers"] if c["name"] == TFJOB_CONTAINER)
        port = next((p["containerPort"] for p in c.get("ports") or [] if p.get("name") == TFJOB_PORT_NAME), TFJOB_PORT)
        rt = t.lower()
        ns = meta.get("namespace", "default")
        cluster[rt] = [f"{meta['name']}-{rt}-{i}.{ns}.svc:{port}" for i in range(s.get("replicas", 1))]
    return {"cluster": cluster, "task": {"type": rtype.lower(), "index": index}, "environment": "cloud"}


#: The documented differences, applied to the TFJob side before comparing.
DIFFERENCES = (
    "the evaluator is not listed in cluster",
    "Master's task type is chief",
    "no 'environment' key",
    "addresses are <job>-<i>.<fullname>[...]:<port> names of the same tasks",
)


def _task_of_tfjob_address(address: str) -> tuple[str, int, int]:
    host, port = address.rsplit(":", 1)
    m = re.match(r"^.+-(chief|master|worker|ps|evaluator)-(\d+)\.[^.]+\.svc(\..+)?$", host)
    if not m:
        raise ValueError(f"not a TFJob address: {address}")
    return ROLE_OF[m.group(1)], int(m.group(2)), int(port)


def compare(tfjob: dict, docs: list[dict], namespace: str) -> list[str]:
    """Task-by-task differences between the TFJob controller's TF_CONFIG and the rendered release's,
    beyond DIFFERENCES; [] when every task matches."""
    pods = manifests.pods(docs, namespace=namespace)
    by_host = {f"{p.hostname}.{p.subdomain}": p for p in pods}

    def chart_task(address: str) -> tuple[str, int, int]:
        host, port = address.rsplit(":", 1)
        short = ".".join(host.split(".")[:2])
        p = by_host[short]
        return p.role, p.index, int(port)

    problems = []
    types = {ROLE_OF[t.lower()]: t for t in tfjob["spec"]["tfReplicaSpecs"]}
    seen = set()
    for p in pods:
        seen.add((p.role, p.index))
        theirs = tfjob_tf_config(tfjob, types[p.role], p.index)
        ours = p.tf_config
        if theirs is None or ours is None:
            if (theirs is None) != (ours is None):
                problems.append(
                    f"{p.role}-{p.index}: TF_CONFIG {'set' if ours else 'absent'} here, "
                    f"{'set' if theirs else 'absent'} under TFJob"
                )
            continue
        want = {
            ROLE_OF[rt]: [_task_of_tfjob_address(a) for a in addrs]
            for rt, addrs in theirs["cluster"].items()
            if ROLE_OF[rt] != "evaluator" and addrs  # a replica type with replicas: 0 lists no address
        }
        got = {role: [chart_task(a) for a in addrs] for role, addrs in ours["cluster"].items()}
        if want != got:
            problems.append(f"{p.role}-{p.index}: cluster {got} here, {want} under TFJob")
        task = {"type": ROLE_OF[theirs["task"]["type"]], "index": theirs["task"]["index"]}
        if ours["task"] != task:
            problems.append(f"{p.role}-{p.index}: task {ours['task']} here, {task} under TFJob")
    want_tasks = {
        (ROLE_OF[t.lower()], i) for t, s in tfjob["spec"]["tfReplicaSpecs"].items() for i in range(s.get("replicas", 1))
    }
    if seen != want_tasks:
        problems.append(f"tasks {sorted(seen)} here, {sorted(want_tasks)} under TFJob")
    return problems


def notes_text(notes: Iterable[Note]) -> str:
    return "".join(f"  {n}\n" for n in notes)
