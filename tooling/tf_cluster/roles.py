"""The roles of a TensorFlow cluster, read from the chart's own table (charts/tf-cluster/files/roles.yaml),
so the chart and the tooling can never disagree on which roles exist or what they do."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from . import CHART

TABLE = CHART / "files" / "roles.yaml"


@dataclass(frozen=True)
class Role:
    name: str
    in_cluster: bool  # listed in TF_CONFIG's cluster
    port: bool  # runs a TF gRPC server
    waits_for_peers: bool
    may_lead: bool  # may be the leading Job
    stops_with_leader: tuple[str, ...]  # strategies under which it stops when the leader ends
    max_replicas: int  # 0 = no limit
    in_gang: bool  # starts all-or-nothing with the other gang roles


def load() -> tuple[Role, ...]:
    return tuple(
        Role(
            r["name"],
            r["inCluster"],
            r["port"],
            r["waitsForPeers"],
            r["mayLead"],
            tuple(r["stopsWithLeader"]),
            int(r["maxReplicas"]),
            r["inGang"],
        )
        for r in yaml.safe_load(TABLE.read_text())
    )


ROLES = load()
NAMES = tuple(r.name for r in ROLES)
BY_NAME = {r.name: r for r in ROLES}
#: Roles that may lead, in the order the chart picks the leader (the first present one).
LEADERS = tuple(r.name for r in ROLES if r.may_lead)


def order(name: str) -> int:
    """Position of a role in the table (unknown names last)."""
    return NAMES.index(name) if name in NAMES else len(NAMES)
