"""The shipped GitHub Actions workflow: certifies every bundle on sim and kind for pull requests,
gates promotion on merge, and its steps call only `catalog` (besides setup and the commit)."""

from __future__ import annotations

import re
import shlex
from importlib import resources
from typing import Any

import pytest
import yaml

from gpucatalog import cli

WORKFLOW = resources.files("gpucatalog.pipelines").joinpath("ci/github-actions.yaml")
# Setup and persistence steps that are not catalog logic.
ALLOWED = {("python", "-m", "pip", "install", "."), ("git",)}
# Sub-commands written on other branches (certify/validate: the lead; toolchain: the skeleton).
OTHER_COMMANDS = {"certify", "validate", "toolchain"}


def _doc() -> dict[Any, Any]:
    doc: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return doc


def _commands() -> list[list[str]]:
    out = []
    for job in _doc()["jobs"].values():
        for step in job["steps"]:
            if "run" not in step:
                continue
            for line in step["run"].strip().splitlines():
                # Fill ${{ … }} expressions with a plain word so the line can be parsed.
                line = re.sub(r"\$\{\{[^}]*\}\}", "X", line)
                out.append(shlex.split(line))
    # Folded (>-) scalars arrive as one line already.
    return out


def test_triggers_and_matrix() -> None:
    doc = _doc()
    on = doc[True] if True in doc else doc["on"]  # YAML 1.1 reads the key `on` as True
    assert "pull_request" in on and on["push"]["branches"] == ["main"]
    matrix = doc["jobs"]["certify"]["strategy"]["matrix"]
    assert set(matrix["cluster"]) == {"sim", "kind"}
    assert {"gpu-scheduling", "slurm"} <= set(matrix["bundle"])
    assert doc["jobs"]["promote-candidate"]["if"] == "github.event_name == 'push'"
    assert doc["jobs"]["promote-candidate"]["needs"] == "certify"


def test_steps_call_only_catalog() -> None:
    cmds = _commands()
    assert cmds
    for argv in cmds:
        if argv[0] == "catalog":
            continue
        assert tuple(argv) in ALLOWED or (argv[0],) in ALLOWED, f"non-catalog step: {argv}"


def test_our_catalog_commands_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("keys", "promote", "publish"))
    parser = cli.build_parser()
    ours = [a for a in _commands() if a[0] == "catalog" and a[1] not in OTHER_COMMANDS]
    assert {a[1] for a in ours} == {"keys", "promote"}
    for argv in ours:
        parser.parse_args(argv[1:])  # raises InputError on an unknown flag
