"""What a waiting gang's line quotes of the scheduler (tf_cluster.gang.Gang.scheduler_says): its
words, less kube-scheduler 1.37.2's dynamic-resources "not found", which it adds for gangs that
claim no device and which a user took for the reason the gang waits."""

from __future__ import annotations

from types import SimpleNamespace as T

import pytest

from tf_cluster.gang import Gang, without_noise

NOISE = 'error in "DynamicResources" PodGroupPostFilter plugins: not found'
FIT = "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {tf-cluster.dev/extra-node: true}."


def pending(message: str):
    scheduled = T(type="PodScheduled", status="False", message=message)
    return T(spec=T(node_name=None), status=T(conditions=[scheduled]))


@pytest.mark.parametrize(
    "message,want",
    [
        (f"{FIT} {NOISE}", FIT),
        (f"{FIT}; {NOISE}", FIT),
        (f"{NOISE}; {FIT}", FIT),
        (f"running PodGroupPostFilter plugin: {NOISE}", "running PodGroupPostFilter plugin"),
        (NOISE, ""),
        (FIT, FIT),
        ("", ""),
    ],
)
def test_the_dynamic_resources_not_found_is_left_out_and_the_rest_kept(message, want):
    assert without_noise(message) == want


def test_a_gang_quotes_its_pods_reasons_without_the_noise_and_the_podgroups_when_they_said_only_that():
    gang = Gang("g", pods=[pending(NOISE), pending(f"{FIT} {NOISE}"), pending(FIT)])
    assert gang.scheduler_says() == FIT
    only_noise = Gang("g", pods=[pending(NOISE)], condition="minCount (2) cannot be satisfied: 0 scheduled")
    assert only_noise.scheduler_says() == "minCount (2) cannot be satisfied: 0 scheduled"
    assert Gang("g", pods=[pending(NOISE)], condition=NOISE).scheduler_says() == ""
