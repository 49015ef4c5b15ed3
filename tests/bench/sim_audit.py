"""Reading the simulated cluster's audit log (hack/node/sim.py `SimCluster.audit`): whose request each
event is, which requests were a task's first LIST of the release's pods, which watches were renewals.
Pure functions of the events, so that tests/bench/test_benchmarks.py checks them without a cluster."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import parse_qs, urlsplit

POD_NAME = "authentication.kubernetes.io/pod-name"  # in user.extra: the pod a token is bound to (sim.py's are)


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def received(event: dict) -> float:
    """When the API server received the request (epoch seconds)."""
    return epoch(event["requestReceivedTimestamp"])


def answered(event: dict) -> float:
    """When the event's stage was reached: a LIST's whole answer sent (ResponseComplete)."""
    return epoch(event["stageTimestamp"])


def task_of(event: dict) -> str:
    """The pod whose token sent the request ("?" for a token bound to no pod)."""
    return ((event.get("user") or {}).get("extra") or {}).get(POD_NAME, ["?"])[0]


def query(event: dict) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(event.get("requestURI", "")).query).items()}


def within(events: list[dict], since: float, until: float) -> list[dict]:
    return [e for e in events if since <= received(e) < until]


def by_verb(events: list[dict]) -> dict[str, int]:
    """Requests by verb and resource ("watch pods", "patch pods/status"), most first."""
    out: dict[str, int] = {}
    for e in events:
        ref = e.get("objectRef") or {}
        resource = ref.get("resource", "") + ("/" + ref["subresource"] if ref.get("subresource") else "")
        key = f"{e['verb']} {resource}"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def on_release(event: dict, selector: str) -> bool:
    """Is this a LIST or WATCH of the release's pods (its label selector: every pod of the release)?"""
    ref = event.get("objectRef") or {}
    return (
        event["verb"] in ("list", "watch")
        and ref.get("resource") == "pods"
        and query(event).get("labelSelector") == selector
    )


def first_list(events: list[dict], task: str, selector: str) -> dict | None:
    """`task`'s first LIST of the release's pods, every page of it (a paged LIST's later pages carry
    `continue`): when its first page was received, when its last was answered, how many pages, and
    whether it is known to be whole (the audit log has a page once it is answered, not the page's
    `continue`: a paged LIST is whole once the task asks something else of the release's pods, its
    watch; one without `limit` is one answer); None when the task listed none."""
    mine = sorted((e for e in events if task_of(e) == task and on_release(e, selector)), key=received)
    at = next((i for i, e in enumerate(mine) if e["verb"] == "list"), None)
    if at is None:
        return None
    pages = [mine[at]]
    for e in mine[at + 1 :]:
        if e["verb"] != "list" or "continue" not in query(e):
            break  # its watch, or a new LIST: the first ended with the page before
        pages.append(e)
    complete = at + len(pages) < len(mine) or "limit" not in query(pages[0])
    return {
        "task": task,
        "began": received(pages[0]),
        "done": answered(pages[-1]),
        "pages": len(pages),
        "complete": complete,
    }


def watch_key(event: dict) -> tuple[str, ...]:
    """What a watch watches, for one task: its resource and selectors (a renewal asks the same)."""
    ref, q = event.get("objectRef") or {}, query(event)
    return (task_of(event), ref.get("resource", ""), q.get("labelSelector", ""), q.get("fieldSelector", ""))


def renewals(events: list[dict]) -> list[dict]:
    """The watches that renew one: each after the task's first watch of the same resource and selectors."""
    seen: set[tuple[str, ...]] = set()
    out = []
    for e in sorted((e for e in events if e["verb"] == "watch"), key=received):
        key = watch_key(e)
        if key in seen:
            out.append(e)
        seen.add(key)
    return out
