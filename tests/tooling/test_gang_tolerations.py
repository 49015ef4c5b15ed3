"""Which nodes count for a gang's room (tf_cluster.gang.capacity): a node whose NoSchedule or
NoExecute taint the gang's pods do not tolerate gives them nothing (the harness's extra nodes,
tainted tf-cluster.dev/extra-node, measured: counted, they made the waiter's figures wrong)."""

from __future__ import annotations

from types import SimpleNamespace as T

import pytest

from tf_cluster.gang import tolerated

EXTRA = T(key="tf-cluster.dev/extra-node", value="true", effect="NoSchedule")


@pytest.mark.parametrize(
    "tolerations,want",
    [
        (None, False),
        ([], False),
        ([T(key="tf-cluster.dev/extra-node", operator="Exists", value=None, effect="NoSchedule")], True),
        ([T(key="tf-cluster.dev/extra-node", operator="Equal", value="true", effect=None)], True),
        ([T(key="tf-cluster.dev/extra-node", operator="Equal", value="false", effect=None)], False),
        ([T(key=None, operator="Exists", value=None, effect=None)], True),  # tolerates everything
        ([T(key="tf-cluster.dev/extra-node", operator="Exists", value=None, effect="NoExecute")], False),
        # the chart's lost-node tolerations do not reach other taints
        ([T(key="node.kubernetes.io/unreachable", operator="Exists", value=None, effect="NoExecute")], False),
    ],
)
def test_a_taint_is_tolerated_as_kubernetes_matches_it(tolerations, want):
    assert tolerated(EXTRA, tolerations) is want
