"""The self-contained HTML report of a certification run: summary, per-suite case timelines,
GPU allocation per node, the remediation state timeline and the scale suite's fills (units
running over time per team), as inline SVG with inline CSS.

Called by ``evidence.write_evidence`` with the in-toto statement. The pictures are computed
here (geometry as plain numbers) and drawn by ``templates/report.html.j2``; nothing is fetched
from outside the file, so the report can be opened from a CI artifact on any machine. Pictures
read the free-form case details the suites record: ``details["placements"] =
[{pod, node, gpu, fraction}]``, ``details["steps"] = [{state, t}]`` (``t`` in seconds) and
``details["series"] = {team: [[t, running], ...]}``.
"""

from __future__ import annotations

import hashlib
import html
import math
from collections.abc import Mapping
from typing import Any

import jinja2

WIDTH = 1000  # drawing width of every picture, px
LABEL_W = 260  # left margin for row labels, px
ROW_H = 22

# "skipped" is a case that was not run; "incomplete" a suite or run with such a case.
RESULT_COLOURS = {"passed": "#2e9d5b", "failed": "#d64545", "skipped": "#b7791f", "incomplete": "#b7791f"}
STATE_COLOURS = {
    "healthy": "#2e9d5b", "detected": "#d64545", "faulty": "#d64545", "fault": "#d64545",
    "cordoned": "#e8890c", "draining": "#f0b429", "drained": "#f0b429", "repairing": "#7b4fc9",
    "resetting": "#7b4fc9", "rebooting": "#7b4fc9", "verifying": "#2f6fd1", "uncordoned": "#2e9d5b",
    "recovered": "#2e9d5b", "escalated": "#6b1f1f", "faultdetected": "#d64545",
}
_PALETTE = ["#2f6fd1", "#e8890c", "#7b4fc9", "#1f9aa8", "#c94f9a", "#6b8e23", "#b5651d", "#546e7a"]


def _colour_for(name: str) -> str:
    key = name.lower()
    if key in STATE_COLOURS:
        return STATE_COLOURS[key]
    # Longest known state first, so "Uncordoned" is not taken for "cordoned".
    for k, c in sorted(STATE_COLOURS.items(), key=lambda kv: -len(kv[0])):
        if k in key:
            return c
    return _PALETTE[int(hashlib.sha256(name.encode()).hexdigest(), 16) % len(_PALETTE)]


def _ticks(span: float, width: float) -> list[dict[str, Any]]:
    steps = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600)
    # Past ten hours, ten equal steps (a bogus span must not make a million ticks).
    step: float = next((s for s in steps if span / s <= 10), span / 10)
    out = []
    for i in range(11):
        t = i * step
        if t > span + 1e-9:
            break
        out.append({"x": LABEL_W + t / span * width, "label": f"{round(t, 3):g}s"})
    return out


def suite_timelines(suites: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One gantt per suite: its cases in run order, each bar from its start to its end."""
    out = []
    for s in suites:
        cases = s.get("cases", [])
        span = max(sum(max(_number(c.get("seconds")) or 0.0, 0.0) for c in cases), 0.001)
        width = WIDTH - LABEL_W - 60
        bars, t = [], 0.0
        for i, c in enumerate(cases):
            secs = max(_number(c.get("seconds")) or 0.0, 0.0)
            bars.append({
                "y": 20 + i * ROW_H, "label": c["name"], "x": LABEL_W + t / span * width,
                "w": max(secs / span * width, 2.0), "colour": RESULT_COLOURS.get(c.get("result", ""), "#9aa1a9"),
                "title": f"{c['name']}: {c.get('result')} in {secs:.2f}s" + (f" — {c['reason']}" if c.get("reason") else ""),
                "secs": f"{secs:.2f}s",
            })
            t += secs
        out.append({"name": s["name"], "result": s.get("result"), "bars": bars,
                    "height": 30 + max(len(cases), 1) * ROW_H, "ticks": _ticks(span, width), "axis_y": 14})
    return out


MAX_GPU_COLUMNS = 64  # a picture never grows wider than this many GPUs per node, whatever details say


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or None (details are free-form: None, strings, NaN …)."""
    if isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return out if math.isfinite(out) else None


def _index(gpu: Any) -> int | None:
    """A GPU given as a small whole number (``0``, ``"3"``) is drawn at that column."""
    n = _number(gpu)
    return int(n) if n is not None and n.is_integer() and 0 <= n < MAX_GPU_COLUMNS else None


class _NodeGpus:
    """The GPUs of one node as the report draws them: numbered GPUs at their index, then each
    named one (KAI's ``group/GPU-<uuid>``) in order of appearance, then each whole GPU a pod took
    without naming it."""

    def __init__(self) -> None:
        self.numbered: dict[int, list[tuple[str, float]]] = {}
        self.named: dict[str, list[tuple[str, float]]] = {}
        self.anonymous: list[tuple[str, tuple[str, float]]] = []

    def add(self, p: Mapping[str, Any]) -> None:
        pod = str(p.get("pod") if p.get("pod") is not None else "?")
        gpu = p.get("gpu")
        fraction = _number(p.get("fraction"))
        whole = _number(p.get("gpus"))
        if fraction is not None and fraction > 0:
            share = (pod, fraction)
        elif whole is not None and whole >= 1:
            # A whole-GPU pod (KAI: fraction None, gpus N) fills N devices.
            if gpu is None:
                for i in range(min(int(whole), MAX_GPU_COLUMNS)):
                    self.anonymous.append((f"{pod}#{i}", (pod, 1.0)))
                return
            share = (pod, 1.0)
        else:
            share = (pod, 1.0)  # an older or odd record: one device's worth
        index = _index(gpu)
        if index is not None:
            self.numbered.setdefault(index, []).append(share)
        elif gpu is None or gpu == "":
            self.anonymous.append((f"{pod}#0", share))
        else:
            self.named.setdefault(str(gpu), []).append(share)

    def columns(self, width: int) -> list[tuple[str, list[tuple[str, float]]]]:
        """(label, shares) per GPU column: at least ``width`` columns (the node's GPUs), named and
        unnamed GPUs in the columns no numbered GPU took, at most MAX_GPU_COLUMNS."""
        n = max([width] + [i + 1 for i in self.numbered])
        cols = [(str(i), self.numbered.get(i, [])) for i in range(n)]
        free = [i for i in range(n) if i not in self.numbered]
        extra = list(self.named.items()) + [("whole", [share]) for _label, share in self.anonymous]
        for label, shares in extra:
            if free:
                cols[free.pop(0)] = (label, shares)
            else:
                cols.append((label, shares))
        return cols[:MAX_GPU_COLUMNS]


def gpu_allocations(suites: list[Mapping[str, Any]], cluster: Mapping[str, Any]) -> list[dict[str, Any]]:
    """For each case that recorded placements: per node a row of GPUs, each filled by the
    fractions of the pods placed on it (one colour per pod). Takes every shape a suite records
    (numbered GPUs, KAI's GPU-group strings, whole-GPU pods without a fraction) and ignores what
    it cannot read."""
    node_gpus: dict[str, int] = {}
    for n in cluster.get("nodes", []) if isinstance(cluster.get("nodes"), list) else []:
        if isinstance(n, Mapping):
            node_gpus[str(n.get("name"))] = int(min(max(_number(n.get("gpus")) or 0, 0), MAX_GPU_COLUMNS))
    pictures = []
    for s in suites:
        for c in s.get("cases", []):
            details = c.get("details") if isinstance(c, Mapping) else None
            placements = details.get("placements") if isinstance(details, Mapping) else None
            if not isinstance(placements, list):
                continue
            by_node: dict[str, _NodeGpus] = {}
            for p in placements:
                if isinstance(p, Mapping):
                    by_node.setdefault(str(p.get("node") if p.get("node") is not None else "?"), _NodeGpus()).add(p)
            if not by_node:
                continue
            nodes = sorted(by_node)
            columns = {n: by_node[n].columns(node_gpus.get(n, 0)) for n in nodes}
            n_gpus = max(len(cols) for cols in columns.values())
            cell_w = min((WIDTH - LABEL_W - 20) / max(n_gpus, 1), 90)
            cell_h = 34
            pods = sorted({pod for cols in columns.values() for _l, shares in cols for pod, _f in shares})
            # Colours by position within the picture, so neighbouring pods never share one.
            colour = {pod: _PALETTE[i % len(_PALETTE)] for i, pod in enumerate(pods)}
            rows, legend = [], {}
            for r, node in enumerate(nodes):
                y = 24 + r * (cell_h + 10)
                cells = []
                for g, (label, shares) in enumerate(columns[node]):
                    x = LABEL_W + g * cell_w
                    segs, used = [], 0.0
                    for pod, frac in shares:
                        # Stack fractions bottom-up; over-allocation shows as a red outline.
                        segs.append({"x": x + 2, "y": y + cell_h * (1 - min(used + frac, 1.0)),
                                     "w": cell_w - 4, "h": cell_h * min(frac, max(1.0 - used, 0.0)),
                                     "colour": colour[pod], "title": f"{pod}: {frac:g} of GPU {label} on {node}"})
                        legend[pod] = colour[pod]
                        used += frac
                    cells.append({"x": x + 2, "y": y, "w": cell_w - 4, "h": cell_h, "segs": segs, "gpu": label,
                                  "over": used > 1.0 + 1e-9, "used": f"{used:g}"})
                rows.append({"node": node, "y": y, "label_y": y + cell_h / 2 + 4, "cells": cells})
            legend_items = [{"pod": p, "colour": col} for p, col in sorted(legend.items())]
            height = 30 + len(nodes) * (cell_h + 10)
            pictures.append({"suite": str(s.get("name")), "case": str(c.get("name")), "rows": rows, "height": height,
                             "header": [{"x": LABEL_W + g * cell_w + cell_w / 2, "label": f"GPU {g}"} for g in range(n_gpus)],
                             "legend": legend_items})
    return pictures


def remediation_timelines(suites: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """One row per case that recorded remediation steps: coloured spans from each state to the next."""
    rows_in = []
    for s in suites:
        for c in s.get("cases", []):
            details = c.get("details") if isinstance(c.get("details"), Mapping) else {}
            steps = details.get("steps")
            # details are free-form: draw only well-formed [{state, t}] lists, never fail the report
            if isinstance(steps, list) and steps and all(isinstance(x, dict) and _number(x.get("t")) is not None
                                                         for x in steps):
                label = f"{s['name']}/{c['name']}"
                node = details.get("node")
                rows_in.append((label + (f" ({node})" if node else ""), sorted(steps, key=lambda st: float(st["t"]))))
    if not rows_in:
        return None
    span = max(max(float(st[-1]["t"]) - float(st[0]["t"]) for _, st in rows_in), 0.001)
    width = WIDTH - LABEL_W - 20
    tail = span * 0.06  # the last state has no end; draw it a little past its start
    span_all = span + tail
    rows, legend = [], {}
    for i, (label, steps) in enumerate(rows_in):
        t0 = float(steps[0]["t"])
        y = 24 + i * (ROW_H + 8)
        spans = []
        for j, st in enumerate(steps):
            start = float(st["t"]) - t0
            end = float(steps[j + 1]["t"]) - t0 if j + 1 < len(steps) else start + tail
            state = str(st.get("state", "?"))
            legend[state] = _colour_for(state)
            spans.append({"x": LABEL_W + start / span_all * width, "w": max((end - start) / span_all * width, 2.0),
                          "colour": _colour_for(state), "title": f"{state} at +{start:.2f}s",
                          "state": state, "show": (end - start) / span_all * width > 7 * len(state)})
        rows.append({"label": label, "y": y, "spans": spans})
    return {"rows": rows, "height": 40 + len(rows) * (ROW_H + 8), "ticks": _ticks(span_all, width),
            "legend": [{"state": k, "colour": v} for k, v in legend.items()]}


FILL_H = 180  # plot height of one fill, px


def _floor_note(details: Mapping[str, Any]) -> str:
    """"floor …; … above it" when the case measured the cluster's floor, else empty."""
    found = details.get("floor")
    floor: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    secs, pods, over = _number(floor.get("seconds")), _number(floor.get("pods")), _number(details.get("over_floor_s"))
    if secs is None or pods is None or over is None:
        return ""
    return (f"Floor: {pods:g} pods placed in {secs:.1f} s with no scheduler (bound by the suite as they "
            f"appeared); the stack took {over:.1f} s above it.")


def fill_curves(suites: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One plot per case that recorded ``series``: a line per team, units running against seconds."""
    plots = []
    for s in suites:
        for c in s.get("cases", []):
            details = c.get("details") if isinstance(c.get("details"), Mapping) else {}
            series = details.get("series")
            # details are free-form: draw only {team: [[t, n], ...]} with numbers, never fail the report
            if not isinstance(series, Mapping) or not series or not all(
                    isinstance(pts, list) and pts and all(isinstance(p, list) and len(p) == 2
                                                          and _number(p[0]) is not None and _number(p[1]) is not None
                                                          for p in pts) for pts in series.values()):
                continue
            span = max(max(float(p[0]) for p in pts) for pts in series.values()) or 0.001
            top = max(max(float(p[1]) for p in pts) for pts in series.values()) or 1.0
            width = WIDTH - LABEL_W - 20
            lines: list[dict[str, Any]] = []
            for team, pts in sorted(series.items()):
                xy = " ".join(f"{LABEL_W + float(t) / span * width:.1f},{20 + (1 - float(n) / top) * FILL_H:.1f}"
                              for t, n in pts)
                lines.append({"team": str(team), "points": xy, "colour": _PALETTE[len(lines) % len(_PALETTE)],
                              "last": int(float(pts[-1][1]))})
            plots.append({"suite": str(s.get("name")), "case": str(c.get("name")), "lines": lines,
                          "floor": _floor_note(details),
                          "ticks": _ticks(span, width), "top": int(top), "height": FILL_H + 40,
                          "base_y": 20 + FILL_H})
    return plots


def render(statement: Mapping[str, Any]) -> str:
    pred = statement["predicate"]
    suites = pred.get("suites", [])
    subject = statement["subject"][0]
    counts = {"passed": 0, "failed": 0, "skipped": 0}  # skipped: cases not run
    for s in suites:
        for c in s.get("cases", []):
            counts[c.get("result", "failed")] = counts.get(c.get("result", "failed"), 0) + 1
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpucatalog.pipelines", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    )
    return env.get_template("report.html.j2").render(
        pred=pred, subject=subject, counts=counts, colours=RESULT_COLOURS, width=WIDTH, label_w=LABEL_W,
        timelines=suite_timelines(suites), allocations=gpu_allocations(suites, pred.get("cluster", {})),
        remediation=remediation_timelines(suites), fills=fill_curves(suites),
    )


def failure_note(statement: Mapping[str, Any], problem: str) -> str:
    """A minimal page in place of a report that could not be drawn (the signed evidence next
    to it is complete)."""
    found = statement.get("predicate")
    pred: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    title = html.escape(f"{pred.get('bundle')}@{pred.get('version')} ({pred.get('profile')}): {pred.get('result')}")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title></head><body>"
            f"<h1>{title}</h1><p>The report could not be drawn: <code>{html.escape(problem)}</code>. "
            "The signed evidence (evidence.dsse.json, statement.json) is complete.</p></body></html>\n")
