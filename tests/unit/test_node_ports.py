"""The node harness's fixed ports (hack/node/config.FIXED_PORTS) against Linux's ephemeral range: a
listener at a fixed number inside it collides at random with an outgoing connection's source port
(`bind: address already in use` on 35000, twice in a row). The listeners of a running node are
checked in tests/e2e/cluster/test_harness_ports.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))
from node import ports  # noqa: E402
from node.config import FIXED_PORTS  # noqa: E402

LINUX_DEFAULT_RANGE = (32768, 60999)


def test_no_fixed_port_of_the_harness_is_in_linuxs_default_ephemeral_range():
    assert ports.exposed(FIXED_PORTS, LINUX_DEFAULT_RANGE, set()) == []


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("", set()), ("8080", {8080}), ("8080,9000-9002", {8080, 9000, 9001, 9002}), (" 1-2 , 5\n", {1, 2, 5})],
    ids=["empty", "one", "list-and-range", "spaces"],
)
def test_reserved_ports_are_read_in_the_sysctls_syntax(text, parsed):
    assert ports.parse_ports(text) == parsed
    assert ports.parse_ports(ports.format_ports(parsed)) == parsed


@pytest.mark.parametrize(
    ("port_range", "reserved", "exposed"),
    [
        ((32768, 60999), set(), []),
        ((1024, 65535), set(), sorted(p for p in FIXED_PORTS if p >= 1024)),
        ((1024, 65535), set(FIXED_PORTS), []),
        ((12000, 13000), {12379}, [12380]),
    ],
    ids=["linux-default", "wide-range", "wide-range-reserved", "one-reserved"],
)
def test_a_port_is_exposed_when_inside_the_range_and_unreserved(port_range, reserved, exposed):
    assert ports.exposed(FIXED_PORTS, port_range, reserved) == exposed


@pytest.fixture
def sysctls(tmp_path, monkeypatch):
    """The two sysctls as files of a folder (the real ones need root and are the machine's)."""
    (tmp_path / "ip_local_port_range").write_text("1024\t65535\n")
    (tmp_path / "ip_local_reserved_ports").write_text("8080,9000-9001\n")
    monkeypatch.setattr(ports, "SYSCTL", tmp_path)
    monkeypatch.setattr(ports, "RECORD", tmp_path / "state" / "reserved-ports")
    monkeypatch.setattr(ports, "say", lambda msg: None)
    return tmp_path


def test_up_reserves_the_exposed_ports_and_down_gives_back_only_those(sysctls, monkeypatch):
    monkeypatch.setattr(ports, "free", lambda port: True)
    ports.guard()
    assert ports.reserved() == {8080, 9000, 9001} | {p for p in FIXED_PORTS if p >= 1024}
    # another program reserves a port meanwhile: down must keep it, and the machine's own
    (sysctls / "ip_local_reserved_ports").write_text(ports.format_ports(ports.reserved() | {40000}))
    ports.release()
    assert ports.reserved() == {8080, 9000, 9001, 40000}
    ports.release()  # a second down changes nothing
    assert ports.reserved() == {8080, 9000, 9001, 40000}


def test_up_names_the_holder_of_a_taken_port_before_starting_anything(sysctls, monkeypatch):
    monkeypatch.setattr(ports, "free", lambda port: port != 15000)
    monkeypatch.setattr(ports, "pid_of", lambda name: None)
    monkeypatch.setattr(ports, "holder", lambda port: 'users:(("nc",pid=42,fd=3))')
    with pytest.raises(ports.NodeError, match=r'15000 \(registry\) held by users:\(\("nc",pid=42'):
        ports.guard()
