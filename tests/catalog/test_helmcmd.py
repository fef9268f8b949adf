"""Helm run as a direct child (no shell): a cancelled install signals Helm itself, so Helm's own
SIGTERM handler ends its wait and marks the release failed; errors keep pyhelm3's classes."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pyhelm3.errors
import pytest

from gpucatalog.catalog import helmcmd

# stands in for Helm: records the signal it got, as Helm's handler would see it
FAKE_HELM = """\
import signal, sys, time
from pathlib import Path
out = Path(sys.argv[-1])
signal.signal(signal.SIGTERM, lambda *_: (out.write_text("SIGTERM"), sys.exit(1)))
out.write_text("started")
time.sleep(60)
"""


def test_cancelling_signals_helm_itself(tmp_path: Path) -> None:
    script, marker = tmp_path / "fake_helm.py", tmp_path / "marker"
    script.write_text(FAKE_HELM)
    cmd = helmcmd.Command(sys.executable)

    async def go() -> None:
        task = asyncio.ensure_future(cmd.run([str(script), str(marker)]))
        while not marker.exists():
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(go(), 30))
    assert marker.read_text() == "SIGTERM"


@pytest.mark.parametrize("stderr, cls", [
    ("Error: uninstall: Release not loaded: x: release: not found", pyhelm3.errors.ReleaseNotFoundError),
    ("Error: UPGRADE FAILED: context canceled", pyhelm3.errors.CommandCancelledError),
    ("Error: something else", pyhelm3.errors.Error),
])
def test_errors_keep_pyhelm3s_classes(stderr: str, cls: type[Exception]) -> None:
    cmd = helmcmd.Command(sys.executable)
    with pytest.raises(cls) as info:
        asyncio.run(cmd.run(["-c", f"import sys; sys.stderr.write({stderr!r}); sys.exit(1)"]))
    assert type(info.value) is cls


def test_the_kubeconfig_is_passed_as_an_argument(tmp_path: Path) -> None:
    cmd = helmcmd.Command(sys.executable, tmp_path / "kc")
    out = asyncio.run(cmd.run(["-c", "import sys; print(sys.argv[1:])"]))
    assert out.decode().strip() == f"['--kubeconfig', '{tmp_path / 'kc'}']"
