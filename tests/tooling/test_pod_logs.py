"""`tf-cluster logs`: every task's log merged in time order under `[role-i]` as run-local prints
them, and --follow streaming every pod at once, joined by pods created later (a replacement)."""

from __future__ import annotations

import threading
import time

import pytest

from tf_cluster import cluster_state, podlogs
from tf_cluster.errors import TfClusterError, UsageError


def pod(role: str, index: int, name: str, state: str = "running", created: str = "2026-11-25T11:58:00Z"):
    from kubernetes import client

    states = {
        "running": {"running": {"startedAt": created}},
        "ended": {"terminated": {"exitCode": 0, "startedAt": created, "finishedAt": created}},
        "waiting": {"waiting": {"reason": "ContainerCreating"}},
    }
    return client.V1Pod.from_dict(
        {
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "creationTimestamp": created,
                "labels": {cluster_state.COMPONENT: role, cluster_state.INDEX_LABEL: str(index)},
            },
            "spec": {"containers": [{"name": "tensorflow", "image": "trainer"}]},
            "status": {
                "phase": "Pending" if state == "waiting" else "Running",
                "containerStatuses": [
                    {
                        "name": "tensorflow",
                        "image": "t",
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                        "state": states[state],
                    }
                ],
            },
        }
    )


def test_logs_are_merged_in_time_order_each_line_under_its_task():
    chief = "2026-11-25T12:00:01.000000001Z starting\n2026-11-25T12:00:03.5Z Epoch 1/2\n2026-11-25T12:00:05Z done\n"
    worker = "2026-11-25T12:00:02Z waiting for peers\n2026-11-25T12:00:03.25Z joined\n"
    assert podlogs.merged([("chief-0", chief), ("worker-1", worker)]) == [
        "[chief-0] starting",
        "[worker-1] waiting for peers",
        "[worker-1] joined",
        "[chief-0] Epoch 1/2",
        "[chief-0] done",
    ]


def test_a_line_without_a_timestamp_stays_after_the_line_before_it_and_equal_times_keep_each_logs_order():
    a = "2026-11-25T12:00:01Z one\ncontinued\n2026-11-25T12:00:01Z two\n"
    b = "2026-11-25T12:00:01Z other\n"
    assert podlogs.merged([("worker-0", a), ("worker-1", b)]) == [
        "[worker-0] one",
        "[worker-0] continued",
        "[worker-0] two",
        "[worker-1] other",
    ]


def test_lines_are_shown_as_run_local_shows_them_unless_raw():
    bar = "1/4 [===>...] - loss: 0.9000\r4/4 [==============================] - 1s - loss: 0.4000"
    erased = "working\r       \r"  # a redraw that erases itself
    log = f"2026-11-25T12:00:01Z {bar}\n2026-11-25T12:00:02Z {erased}\n2026-11-25T12:00:03Z \n"
    assert podlogs.merged([("worker-0", log)]) == [
        "[worker-0] 4/4 [==============================] - 1s - loss: 0.4000",
        "[worker-0] ",  # an empty line the program printed
    ]
    assert podlogs.merged([("worker-0", log)], raw=True) == [f"[worker-0] {bar}", f"[worker-0] {erased}", "[worker-0] "]
    assert podlogs.shown("ps-0", "serving\n") == "[ps-0] serving"


def test_a_byte_stream_becomes_lines_even_split_mid_line_and_mid_character():
    chunks = [b"first li", b"ne\nsecond\nthird \xe2\x9c", b"\x93", b""]
    assert list(podlogs.lines_of(chunks)) == ["first line", "second", "third \u2713"]
    assert list(podlogs.lines_of([b"a\n"])) == ["a"]


@pytest.mark.parametrize("text,secs", [("30s", 30), ("5m", 300), ("1h30m", 5400), ("2h", 7200)])
def test_since_takes_kubectls_durations(text, secs):
    assert podlogs.seconds(text) == secs


@pytest.mark.parametrize("text", ["5", "5x", "m", "1h 30m", ""])
def test_since_refuses_what_is_not_a_duration(text):
    with pytest.raises(UsageError, match="a duration such as 30s"):
        podlogs.seconds(text)


def test_following_streams_every_pod_at_once_and_picks_up_a_replacement_until_the_jobs_end():
    chief = pod("chief", 0, "chief")
    w0 = pod("worker", 0, "w0-first", state="ended")
    w0_new = pod("worker", 0, "w0-second", created="2026-11-25T11:59:00Z")
    w1_waiting = pod("worker", 1, "w1", state="waiting")
    w1 = pod("worker", 1, "w1")
    listings = [([chief, w0, w1_waiting], False), ([chief, w0, w0_new, w1], False)]
    release = threading.Event()  # the chief's log stays open until the replacement has spoken

    def list_pods():
        return listings.pop(0) if listings else ([chief, w0, w0_new, w1], True)

    opened: list[tuple[str, bool]] = []

    def open_log(p, first):
        opened.append((p.metadata.name, first))
        if p.metadata.name == "chief":
            yield "Epoch 1/2"
            assert release.wait(10)
            yield "Epoch 2/2"
        else:
            yield f"hello from {p.metadata.name}"
            if p.metadata.name == "w0-second":
                release.set()

    said: list[str] = []
    notes: list[str] = []
    t0 = time.monotonic()
    podlogs.Follower(list_pods, open_log, said.append, notes.append, relist=0.01).run()
    assert time.monotonic() - t0 < 5 and notes == []
    assert sorted(opened) == [("chief", True), ("w0-first", True), ("w0-second", False), ("w1", False)]
    assert said.index("[chief-0] Epoch 1/2") < said.index("[worker-0] hello from w0-second")
    assert said.index("[worker-0] hello from w0-second") < said.index("[chief-0] Epoch 2/2")
    assert sorted(said) == sorted(
        [
            "[chief-0] Epoch 1/2",
            "[chief-0] Epoch 2/2",
            "[worker-0] hello from w0-first",
            "[worker-0] hello from w0-second",
            "[worker-1] hello from w1",
        ]
    )


def test_a_log_that_breaks_is_noted_and_the_others_go_on_and_listing_gives_up_after_a_few_tries():
    a, b = pod("worker", 0, "a"), pod("worker", 1, "b")

    def open_log(p, first):
        if p.metadata.name == "a":
            raise RuntimeError("node gone")
        yield "fine"

    said: list[str] = []
    notes: list[str] = []
    podlogs.Follower(lambda: ([a, b], True), open_log, said.append, notes.append, relist=0.01).run()
    assert said == ["[worker-1] fine"] and notes == ["[worker-0] log of pod a ended: node gone"]

    def broken():
        raise OSError("connection refused")

    with pytest.raises(TfClusterError, match="cannot list the release's pods: connection refused"):
        podlogs.Follower(broken, open_log, said.append, notes.append, relist=0.01).run()
    assert len(notes) == 1 + podlogs.LIST_TRIES - 1
