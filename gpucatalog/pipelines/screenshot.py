"""Screenshot an HTML report with a headless Chromium, so people (and tests) can look at it.

Called by ``bench/report_screenshot.py`` and the report test. Uses Debian's ``chromium`` with
networking, sync and updates off and a throw-away profile, so it leaves nothing behind and
fetches nothing (the report is self-contained anyway).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from gpucatalog.core import errors, executor

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_browser() -> str | None:
    return next((p for p in (shutil.which(c) for c in CANDIDATES) if p), None)


def screenshot(html: Path, png: Path, width: int = 1280, height: int = 1600, timeout: float = 90) -> Path:
    browser = find_browser()
    if browser is None:
        raise errors.NotFoundError("no headless browser found", expected="Debian's chromium (apt-get install -y chromium)")
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-catalog-chromium-") as profile:
        executor.run(
            [
                browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--hide-scrollbars", f"--user-data-dir={profile}", f"--screenshot={png.resolve()}",
                f"--window-size={width},{height}", html.resolve().as_uri(),
            ],
            timeout=timeout,
        )
    if not png.is_file() or png.stat().st_size == 0:
        raise errors.ToolError([browser, "--screenshot"], 1, f"no screenshot written to {png}")
    return png
