"""``helm lint`` of a chart written in this repository, as findings.

Called by ``catalog validate`` for components whose chart lives in ``charts/``, once per values
file set. Uses the pinned helm (``toolchain.build.ensure("helm")``) through the executor. Every
``[ERROR]`` and ``[WARNING]`` line becomes a ``helm-lint`` finding (``[INFO]`` lines are advice,
e.g. "icon is recommended"); a template error's ``file:line`` is lifted into object and field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from gpucatalog.core import errors, executor
from gpucatalog.toolchain import build

_START = re.compile(r"^\[(ERROR|WARNING|INFO)\]\s+(?:([^:\s]*):\s?)?(.*)$")
# helm names the failing template as "<chart>/templates/<file>:<line>[:<col>]".
_TEMPLATE_AT = re.compile(r"[\w.-]+/(templates/[^\s:()]+):(\d+)")
_END = re.compile(r"^(==> |\d+ chart\(s\) linted|Error: )")


def lint_chart(
    chart_dir: str | os.PathLike[str],
    values_files: Sequence[str | os.PathLike[str]] = (),
    *,
    kube_version: str | None = None,
    component: str | None = None,
) -> list[errors.Finding]:
    """Findings of ``helm lint CHART --values F …`` (empty when the chart is clean).

    ``component`` names the findings (default: the chart folder's name).
    """
    chart = Path(chart_dir)
    if not (chart / "Chart.yaml").is_file():
        raise errors.NotFoundError(f"{chart} is not a chart (no Chart.yaml)", path=str(chart))
    argv: list[str] = [str(build.ensure("helm")), "lint", str(chart)]
    for f in values_files:
        if not Path(f).is_file():
            raise errors.NotFoundError(f"values file {f} does not exist", path=str(f))
        argv += ["--values", str(f)]
    if kube_version:
        argv += ["--kube-version", kube_version]
    proc = executor.run(argv, check=False)
    name = component or chart.name
    findings = parse_output(name, proc.stdout + "\n" + proc.stderr)
    if proc.returncode != 0 and not findings:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        findings.append(errors.Finding("helm-lint", f"helm lint failed: {tail[0]}", component=name))
    return findings


def parse_output(chart_name: str, text: str) -> list[errors.Finding]:
    """Findings from helm lint's report; a message's indented continuation lines are joined."""
    entries: list[tuple[str, str, list[str]]] = []  # (level, where, message lines)
    for raw in text.splitlines():
        line = raw.strip()
        m = _START.match(line)
        if m:
            entries.append((m.group(1), m.group(2) or "", [m.group(3)]))
        elif not line or _END.match(line):
            entries.append(("", "", []))  # closes the previous entry
        elif entries and entries[-1][0]:
            entries[-1][2].append(line)
    out: list[errors.Finding] = []
    for level, where, lines in entries:
        if level not in ("ERROR", "WARNING"):
            continue
        message = " ".join(p for p in lines if p)
        obj, field = where, ""
        at = _TEMPLATE_AT.search(message)
        if at:
            obj, field = at.group(1), f"line {at.group(2)}"
        out.append(
            errors.Finding(
                "helm-lint", f"{level.lower()}: {message}", component=chart_name, obj=obj, field=field
            )
        )
    return out
