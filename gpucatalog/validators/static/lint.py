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

from gpucatalog.catalog import errors, executor
from gpucatalog.toolchain import build

_LINE = re.compile(r"^\[(ERROR|WARNING|INFO)\]\s+(?:([^\s:][^:]*?):\s+)?(.*)$")
_TEMPLATE_AT = re.compile(r"template: [^/\s]+/(\S+?):(\d+)(?::\d+)?:")


def lint_chart(
    chart_dir: str | os.PathLike[str],
    values_files: Sequence[str | os.PathLike[str]] = (),
    *,
    kube_version: str | None = None,
) -> list[errors.Finding]:
    """Findings of ``helm lint CHART --values F …`` (empty when the chart is clean)."""
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
    findings = parse_output(chart.name, proc.stdout + "\n" + proc.stderr)
    if proc.returncode != 0 and not findings:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        findings.append(errors.Finding("helm-lint", f"helm lint failed: {tail[0]}", component=chart.name))
    return findings


def parse_output(chart_name: str, text: str) -> list[errors.Finding]:
    out: list[errors.Finding] = []
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m or m.group(1) == "INFO":
            continue
        _, where, message = m.groups()
        obj, field = where or "", ""
        at = _TEMPLATE_AT.search(message)
        if at:
            obj, field = at.group(1), f"line {at.group(2)}"
        out.append(
            errors.Finding(
                "helm-lint", f"{m.group(1).lower()}: {message}", component=chart_name, obj=obj, field=field
            )
        )
    return out
