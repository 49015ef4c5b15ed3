"""Shared fixtures. The render helpers live in tests/rendering.py."""

from __future__ import annotations

import pytest

from rendering import HELM_VERSIONS


@pytest.fixture(params=HELM_VERSIONS, ids=lambda v: f"helm{v}")
def helm_major(request) -> str:
    return request.param
