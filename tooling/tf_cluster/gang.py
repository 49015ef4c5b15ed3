"""Why a gang waits: a release whose pods join a Kubernetes PodGroup (values `scheduling`, 1.37+)
starts whole or not at all, so on a busy cluster every pod stays Pending. This turns what the
scheduler and the nodes say into one statement a user acts on: how many tasks the gang needs at
once, what they request together, what the nodes have free, and what is missing.

The scheduler's own words (kube-scheduler 1.37, GangScheduling plugin) are kept: the pods'
`PodScheduled=False` message ("minCount (3) cannot be satisfied: 1 scheduled, 0 remaining", or a
node fit error) and the PodGroup's `PodGroupInitiallyScheduled` condition, less one phrase of
the dynamic-resources plugin that is not a reason (SCHEDULER_NOISE).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal

RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
# kube-scheduler 1.37.2 adds this to a waiting gang's message when no pod claims a device: its
# dynamic-resources plugin finds no state for the group and errs instead of passing
# (docs/user-guide/gang-scheduling.md). It is not why the gang waits: left out of what we quote.
SCHEDULER_NOISE = re.compile(r'[\s;,:]*error in "DynamicResources" PodGroupPostFilter plugins: not found')


def without_noise(message: str) -> str:
    """The scheduler's message less the dynamic-resources plugin's "not found" ("" if that was all)."""
    return SCHEDULER_NOISE.sub("", message or "").strip(" ;,:")


def quantity(text) -> Decimal:
    from kubernetes.utils import parse_quantity

    return Decimal(parse_quantity(text))


def show(resource: str, amount: Decimal) -> str:
    if resource == "memory":
        gib = amount / (1 << 30)
        return f"{gib:.1f}Gi" if gib >= 1 else f"{amount / (1 << 20):.0f}Mi"
    return f"{amount.normalize():f}" if amount == amount.to_integral() else f"{amount:.2f}"


def pod_requests(pod) -> dict[str, Decimal]:
    """What the scheduler reserves for a pod: its containers' requests summed (init containers
    are not counted: the chart's pods have none)."""
    out: dict[str, Decimal] = {}
    for c in pod.spec.containers or []:
        for k, v in ((c.resources and c.resources.requests) or {}).items():
            out[k] = out.get(k, Decimal(0)) + quantity(v)
    return out


def add(into: dict[str, Decimal], more: dict[str, Decimal], sign: int = 1) -> dict[str, Decimal]:
    for k, v in more.items():
        into[k] = into.get(k, Decimal(0)) + sign * v
    return into


@dataclass
class Gang:
    name: str
    pods: list = field(default_factory=list)  # the gang's live pods
    min_count: int | None = None
    condition: str = ""  # the PodGroup's PodGroupInitiallyScheduled message

    @property
    def unbound(self) -> list:
        return [p for p in self.pods if not p.spec.node_name]

    def scheduler_says(self) -> str:
        msgs = []
        for p in self.unbound:
            for c in p.status.conditions or []:
                said = without_noise(c.message) if c.type == "PodScheduled" and c.status == "False" else ""
                if said and said not in msgs:
                    msgs.append(said)
        return "; ".join(msgs[:2]) or without_noise(self.condition)


def gangs(snap) -> dict[str, Gang]:
    """The snapshot's pods by the PodGroup they join (`spec.schedulingGroup.podGroupName`)."""
    out: dict[str, Gang] = {}
    for p in snap.pods:
        group = getattr(p.spec, "scheduling_group", None)
        name = group.pod_group_name if group else None
        if name and not p.metadata.deletion_timestamp and p.status.phase in ("Pending", "Running"):
            out.setdefault(name, Gang(name)).pods.append(p)
    return out


def tolerated(taint, tolerations) -> bool:
    """Does one of `tolerations` (a pod's, as the client gives them) tolerate `taint`? Kubernetes'
    rule: an empty key with Exists matches every key; the effect must match unless empty."""
    for t in tolerations or []:
        if t.effect and t.effect != taint.effect:
            continue
        if t.operator == "Exists" and (not t.key or t.key == taint.key):
            return True
        if t.key == taint.key and (t.value or "") == (taint.value or ""):
            return True
    return False


def nodes_and_usage(api) -> tuple[list, dict[str, dict[str, Decimal]]]:
    """The uncordoned nodes, and per node the requests of the pods bound to it that still hold
    resources (two LISTs: read once, then `capacity` for each set of tolerations)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    nodes = [n for n in core.list_node().items if not n.spec.unschedulable]
    used: dict[str, dict[str, Decimal]] = {n.metadata.name: {} for n in nodes}
    for p in core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded,status.phase!=Failed").items:
        if p.spec.node_name in used:
            add(used[p.spec.node_name], pod_requests(p))
    return nodes, used


def capacity(api, tolerations=None, state=None) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    """(allocatable, free) over the nodes a pod with `tolerations` may be scheduled to (not
    cordoned, every NoSchedule/NoExecute taint tolerated): free is allocatable minus the requests
    of the pods bound to them that still hold resources. `state`: nodes_and_usage(api), if read."""
    nodes, used = state or nodes_and_usage(api)
    total: dict[str, Decimal] = {}
    free: dict[str, Decimal] = {}
    for n in nodes:
        if not all(tolerated(t, tolerations) for t in n.spec.taints or [] if t.effect in ("NoSchedule", "NoExecute")):
            continue
        alloc = {k: quantity(v) for k, v in (n.status.allocatable or {}).items() if k in RESOURCES}
        add(total, alloc)
        add(free, add(dict(alloc), used[n.metadata.name], -1))
    return total, free


def explain(api, namespace: str, snap) -> tuple[list[str], bool]:
    """One statement per gang that has unbound pods, and whether any of them can never fit the
    cluster (it needs more than the nodes' allocatable: waiting will not help)."""
    from kubernetes import client

    waiting = {n: g for n, g in gangs(snap).items() if g.unbound}
    if not waiting:
        return [], False
    sched = client.SchedulingV1beta1Api(api)
    state = nodes_and_usage(api)
    lines, never = [], False
    for name, g in sorted(waiting.items()):
        # the nodes its tasks may use: a taint they do not tolerate keeps a node's room from them
        total, free = capacity(api, g.unbound[0].spec.tolerations, state)
        try:
            pg = sched.read_namespaced_pod_group(name, namespace)
            g.min_count = pg.spec.scheduling_policy.gang.min_count if pg.spec.scheduling_policy.gang else None
            for c in (pg.status and pg.status.conditions) or []:
                if c.type == "PodGroupInitiallyScheduled" and c.status == "False":
                    g.condition = c.message or c.reason
        except client.ApiException as e:
            if e.status != 404:
                raise
            lines.append(
                f"gang {name}: its PodGroup does not exist, so none of its pods is scheduled (helm get manifest)"
            )
            continue
        need: dict[str, Decimal] = {}
        for p in g.unbound:
            add(need, pod_requests(p))
        short = {k: v - free.get(k, Decimal(0)) for k, v in need.items() if v > free.get(k, Decimal(0))}
        impossible = {k: v for k, v in need.items() if v > total.get(k, Decimal(0))}
        placed = len(g.pods) - len(g.unbound)
        asks = ", ".join(f"{k} {show(k, v)}" for k, v in sorted(need.items()))
        has = ", ".join(f"{k} {show(k, free.get(k, Decimal(0)))}" for k in sorted(need))
        head = (
            f"gang {name} waits whole: {placed} of {len(g.pods)} tasks placed"
            + (f" (minCount {g.min_count})" if g.min_count else "")
            + f"; the {len(g.unbound)} waiting request {asks} at once, the nodes have {has} free"
        )
        if impossible:
            never = True
            over = ", ".join(f"{k} {show(k, v)} > {show(k, total.get(k, Decimal(0)))}" for k, v in impossible.items())
            lines.append(
                f"{head}. It can never start: more than the cluster has at all ({over} allocatable). "
                "Lower roles.*.resources or replicas, or add nodes."
            )
        elif short:
            missing = ", ".join(f"{k} {show(k, v)}" for k, v in short.items())
            lines.append(
                f"{head}. Missing: {missing}. It starts by itself, all tasks at once, when that much "
                "frees up (another release finishing); or lower roles.*.resources or replicas."
            )
        else:
            lines.append(
                f"{head}. That is enough in total: room just freed up (the scheduler retries the gang within seconds), "
                "or no single node fits a task (node selectors, taints, per-node free resources)."
            )
        said = g.scheduler_says()
        if said:
            lines[-1] += f" Scheduler: {said}"
    return lines, never
