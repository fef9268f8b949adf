"""SIGTERM and SIGHUP stop a catalog command as Ctrl-C does (unwinding through the code that tears
down what it started; tests/clusters/sim/test_integration.py sends each to ``cluster up``), and the
handlers a caller had before are back once the command returns."""

from __future__ import annotations

import os
import signal

import pytest

from gpucatalog import cli


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_the_signal_raises_where_ctrl_c_would_and_the_old_handler_comes_back(sig: int) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(KeyboardInterrupt) as exc, cli._stop_signals():
        os.kill(os.getpid(), sig)
    assert isinstance(exc.value, cli._Stopped) and exc.value.signum == sig
    assert signal.getsignal(sig) == before


def test_a_command_leaves_the_callers_handlers_as_they_were() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    assert cli.main(["list"]) == 0
    assert {s: signal.getsignal(s) for s in before} == before
