"""Asking CoreDNS whether a name exists without caching a miss: a query of a record type nothing else
asks for (a new one each time), straight to the resolver of /etc/resolv.conf."""

from __future__ import annotations

import os
import socket

PROBE_OFFSET = int.from_bytes(os.urandom(1), "big")  # tasks probing one name start at different types


def resolv_conf(path: str = "/etc/resolv.conf") -> tuple[list[str], list[str], int]:
    """(nameservers, search domains, ndots) of the pod's resolver."""
    servers: list[str]
    search: list[str]
    servers, search, ndots = [], [], 1
    try:
        with open(path) as f:
            for line in f:
                words = line.split()
                if not words or words[0].startswith(("#", ";")):
                    continue
                if words[0] == "nameserver" and len(words) > 1:
                    servers.append(words[1])
                elif words[0] in ("search", "domain"):
                    search = words[1:]
                elif words[0] == "options":
                    for w in words[1:]:
                        if w.startswith("ndots:") and w[6:].isdigit():
                            ndots = int(w[6:])
    except OSError:
        pass
    return servers, search, ndots


def dns_rcode(server: str, name: str, qtype: int, timeout: float = 1.0) -> int | None:
    """One DNS query (RFC 1035, UDP) for `name`'s records of `qtype`: the response code
    (0 NOERROR, 3 NXDOMAIN), or None without an answer."""
    import random
    import struct

    qid = random.randint(0, 0xFFFF)
    try:
        question = b"".join(bytes([len(p)]) + p.encode("idna") for p in name.rstrip(".").split("."))
        packet = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + question + b"\0" + struct.pack(">HH", qtype, 1)
        family = socket.AF_INET6 if ":" in server else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.settimeout(timeout)
            sock.sendto(packet, (server, 53))
            reply = sock.recv(4096)
    except (OSError, UnicodeError, ValueError):
        return None
    if len(reply) < 4 or struct.unpack(">H", reply[:2])[0] != qid:
        return None
    return reply[3] & 0xF


# RFC 6895's private-use record types: no program asks for them, and CoreDNS answers NOERROR (no
# data) for a name it knows, NXDOMAIN for one it does not. Each probe asks a type not asked before,
# so an NXDOMAIN it gets (cached for the negative TTL, per name and type) never answers a later probe,
# nor TensorFlow's A and AAAA lookups.
PROBE_TYPES = list(range(65280, 65535))


def name_exists(host: str, attempt: int = 0) -> bool | None:
    """Does the cluster's DNS know `host` yet, asked so that no A or AAAA answer gets cached: True,
    False, or None (no resolver to ask, no answer)? Names are tried as the resolver would, through
    its search domains; `attempt` picks the record type asked (a new one per attempt)."""
    servers, search, ndots = resolv_conf()
    if not servers:
        return None
    names = [host + "." + d for d in search]
    names = ([host] + names) if host.count(".") >= ndots else (names + [host])
    qtype = PROBE_TYPES[(PROBE_OFFSET + attempt) % len(PROBE_TYPES)]
    codes: list[int | None] = []
    for name in names:
        codes.append(dns_rcode(servers[0], name, qtype))
        if codes[-1] == 0:
            return True
    return False if all(c == 3 for c in codes) else None
