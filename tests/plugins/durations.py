"""A pytest plugin (loaded by the root conftest): at the end of every run, the slowest tests and the
total per test file, so a slow test is visible the day it lands (DEVELOPMENT.md keeps the table).

A test's time is its setup, call and teardown added up (a session fixture's start lands on the
first test that uses it). Works under pytest-xdist: the controller sees every worker's reports.
``--slowest N`` sets how many tests are listed (default 30; 0 turns the summary off).
``--durations-out FILE`` also writes every test's time as JSON: copied to ``tests/durations.json``
(with the DEVELOPMENT.md table), it lets the next runs start the longest groups first.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

_times: dict[str, float] = defaultdict(float)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slowest", type=int, default=30, metavar="N",
                     help="list the N slowest tests and the time per test file at the end (0: off)")
    parser.addoption("--durations-out", type=Path, default=None, metavar="FILE",
                     help="write each test's seconds as JSON (refresh tests/durations.json from it)")


def plain_id(nodeid: str) -> str:
    """A test's id without the worker group pytest-xdist appends after the last '@'."""
    return nodeid.rpartition("@")[0] if "@" in nodeid.rpartition("::")[2] else nodeid


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _times[report.nodeid] += report.duration


def _minutes(seconds: float) -> str:
    return f"{seconds:7.1f}s" if seconds < 600 else f"{seconds / 60:6.1f}m"


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = session.config.getoption("--durations-out")
    if out is None or not _times or hasattr(session.config, "workerinput"):  # the controller writes it
        return
    times = {plain_id(k): round(v, 1) for k, v in sorted(_times.items())}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(times, indent=0, sort_keys=True) + "\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    count = config.getoption("--slowest")
    if not count or not _times:
        return
    write = terminalreporter.write_line
    terminalreporter.section(f"{count} slowest tests (setup + call + teardown)")
    for nodeid, seconds in sorted(_times.items(), key=lambda kv: -kv[1])[:count]:
        write(f"{_minutes(seconds)}  {nodeid}")
    per_file: dict[str, float] = defaultdict(float)
    for nodeid, seconds in _times.items():
        per_file[nodeid.split("::", 1)[0]] += seconds
    terminalreporter.section("time per test file (slowest first)")
    for path, seconds in sorted(per_file.items(), key=lambda kv: -kv[1]):
        if seconds >= 1.0:
            write(f"{_minutes(seconds)}  {path}")
    write(f"{_minutes(sum(_times.values()))}  in all ({len(_times)} tests; with several workers the wall time is less)")
