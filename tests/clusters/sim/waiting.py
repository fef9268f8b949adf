"""The polling helper of the sim integration tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll ``probe`` until it returns something truthy, which is returned; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = probe()
        if v:
            return v
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")
