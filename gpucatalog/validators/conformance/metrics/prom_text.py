"""A reader of the Prometheus text exposition format (version 0.0.4): samples with their labels.

Only what a conformance case needs to judge a scraped endpoint: ``name{label="value",…} value
[timestamp]`` lines, ``#`` comments skipped, label values unescaped (``\\\\``, ``\\"``, ``\\n``),
``NaN``/``+Inf``/``-Inf`` read as floats. A line that is none of these is an error naming its
number, so a broken exporter fails the case with the line quoted. Called by the
``accelerator_metrics`` suite.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpucatalog.validators.conformance.kit import base

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|\})')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def _unescape(text: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], text)


def _labels(line: str, at: int, line_no: int) -> tuple[dict[str, str], int]:
    """Labels from ``line[at]`` (just after ``{``) to the closing ``}``; returns them and the index after it."""
    out: dict[str, str] = {}
    if line[at:].lstrip().startswith("}"):
        return out, line.index("}", at) + 1
    while True:
        m = _LABEL.match(line, at)
        if m is None:
            raise base.CaseFailed(f"metrics line {line_no}: malformed labels: {line[:200]!r}")
        out[m.group(1)] = _unescape(m.group(2))
        at = m.end()
        if m.group(3) == "}":
            return out, at


def parse(text: str) -> list[Sample]:
    samples: list[Sample] = []
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _NAME.match(line)
        if m is None:
            raise base.CaseFailed(f"metrics line {no}: no metric name: {line[:200]!r}")
        labels: dict[str, str] = {}
        at = m.end()
        if at < len(line) and line[at] == "{":
            labels, at = _labels(line, at + 1, no)
        fields = line[at:].split()
        if not 1 <= len(fields) <= 2:
            raise base.CaseFailed(f"metrics line {no}: expected a value (and an optional timestamp): {line[:200]!r}")
        try:
            value = float(fields[0])
        except ValueError as exc:
            raise base.CaseFailed(f"metrics line {no}: value {fields[0]!r} is not a number") from exc
        samples.append(Sample(m.group(0), labels, value))
    return samples
