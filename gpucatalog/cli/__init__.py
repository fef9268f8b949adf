"""The ``catalog`` command: argument parsing and the one top-level error handler.

Each sub-command lives in its own module of this package and exposes ``register(subparsers)``.
Exit codes: 0 success, 1 a check failed, 2 bad input or usage; 128 + the signal when stopped by
SIGINT, SIGTERM or SIGHUP (each unwinds the same way, so a started cluster is torn down).
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

from gpucatalog.core import cachedir, errors, executor

# Modules of this package that contribute sub-commands, in --help order.
COMMAND_MODULES = (
    "bundles",
    "validate",
    "toolchain",
    "keys",
    "promote",
    "publish",
    "certify",
    "matrix",
    "conformance",
    "install",
    "cluster",
    "engine",
)

EPILOG = """examples:
  catalog list
  catalog render gpu-scheduling --profile sim --out /tmp/r
  catalog validate gpu-scheduling --profile sim
  catalog certify gpu-scheduling --cluster sim --evidence out/evidence
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse exits 2 itself; route through our handler for one consistent format.
        raise errors.InputError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="catalog",
        description="Certified, versioned bundles of GPU-cluster software.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="echo external commands; show tracebacks")
    parser.add_argument("--catalog-dir", help="catalog data folder (default: $CATALOG_DIR or the repo's catalog/)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


class _Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C would be: CI cancellation and a closed terminal stop a
    command as Ctrl-C does, through every ``finally`` that tears down what it started."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum: int, _frame: FrameType | None) -> None:
    raise _Stopped(signum)


@contextmanager
def _stop_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``_Stopped`` while a command runs (main thread only; the previous
    handlers come back afterwards, so a caller such as a test runner keeps its own)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    # A command that seems hung can be asked where it is: `kill -USR1 PID` writes every
    # thread's Python stack to stderr and the command goes on. Only where stderr is a real file
    # (a caller that captured it in memory, as pytest does, has none to write to).
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both of the last two
        pass
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        executor.set_debug(args.debug)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        with _stop_signals():
            rc: int = args.func(args)
        return rc
    except errors.CatalogError as err:
        if debug:
            raise
        print(f"error: {err}", file=sys.stderr)
        if isinstance(err, errors.CheckFailed):
            for f in err.findings:
                print(f"  {f}", file=sys.stderr)
        return err.exit_code
    except OSError as exc:
        # only a cache folder that cannot be written is bad input; any other OSError is a bug
        unusable = cachedir.unusable(exc)
        if unusable is None or debug:
            raise
        print(f"error: {unusable}", file=sys.stderr)
        return unusable.exit_code
    except _Stopped as stopped:
        print(f"stopped by {signal.Signals(stopped.signum).name}", file=sys.stderr)
        return 128 + stopped.signum
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
