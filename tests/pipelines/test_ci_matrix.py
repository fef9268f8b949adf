"""The scheduled matrix workflow and `make matrix`: they run on a schedule (not per change), call
only `catalog` besides setup, and every catalog command line parses with the real CLI."""

from __future__ import annotations

import re
import shlex
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpucatalog import cli
from gpucatalog.toolchain import releases

WORKFLOW = resources.files("gpucatalog.pipelines").joinpath("ci/matrix.yaml")
ROOT = Path(__file__).resolve().parents[2]


def _doc() -> dict[Any, Any]:
    doc: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return doc


def _commands() -> list[list[str]]:
    out = []
    for job in _doc()["jobs"].values():
        for step in job["steps"]:
            for line in step.get("run", "").strip().splitlines():
                out.append(shlex.split(re.sub(r"\$\{\{[^}]*\}\}", "X", line)))
    return out


def test_runs_on_a_schedule_not_per_change() -> None:
    doc = _doc()
    on = doc[True] if True in doc else doc["on"]
    assert on["schedule"][0]["cron"] and "workflow_dispatch" in on
    assert "pull_request" not in on and "push" not in on


def test_steps_are_catalog_commands_that_parse() -> None:
    parser = cli.build_parser()
    cmds = _commands()
    assert any(a[:2] == ["catalog", "matrix"] for a in cmds)
    for argv in cmds:
        if argv[0] != "catalog":
            assert argv[:4] == ["python", "-m", "pip", "install"], argv
            continue
        parser.parse_args(argv[1:])
    matrix_cmd = next(a for a in cmds if a[:2] == ["catalog", "matrix"])
    minors = matrix_cmd[matrix_cmd.index("--kubernetes") + 1]
    assert releases.resolve_list(minors) == list(releases.supported())


def test_make_matrix_target_exists() -> None:
    text = (ROOT / "Makefile").read_text()
    assert re.search(r"^matrix: ", text, re.M) and "catalog matrix $(MATRIX_BUNDLES)" in text
    assert (ROOT / ".ci" / "matrix").stat().st_mode & 0o111
