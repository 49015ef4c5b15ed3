"""What `tf-cluster smoke` (cluster_state.Snapshot.stuck) adds when the scheduler says a claim keeps a
release's pods off the other nodes. The messages are the real scheduler's (Kubernetes 1.37.2,
seen on the three-node harness)."""

from __future__ import annotations

from tf_cluster.cluster_state import volume_hint

SPREAD_GANG_WFFC = (
    "0/3 nodes are available: 1 node(s) didn't match pod topology spread constraints, "
    "2 node(s) didn't find available persistent volumes to bind."
)
NODE_LOCAL_RWO = "0/3 nodes are available: 1 node(s) had volume node affinity conflict, 2 node(s) were unschedulable."


def test_a_node_local_claim_names_the_access_mode_and_single_node_values():
    hint = volume_hint(NODE_LOCAL_RWO)
    assert "storage.<volume>.accessModes" in hint and "scheduling.singleNode=true" in hint


def test_a_waiting_claim_under_a_spread_gang_names_immediate_binding():
    hint = volume_hint(SPREAD_GANG_WFFC)
    assert "volumeBindingMode: Immediate" in hint


def test_other_reasons_get_no_hint():
    assert volume_hint("0/3 nodes are available: 3 Insufficient cpu.") == ""
    assert volume_hint(None) == ""
