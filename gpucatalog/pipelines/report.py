"""The self-contained HTML report of a certification run: summary, per-suite case timelines,
GPU allocation per node and the remediation state timeline, as inline SVG with inline CSS.

Called by ``evidence.write_evidence`` with the in-toto statement. The pictures are computed
here (geometry as plain numbers) and drawn by ``templates/report.html.j2``; nothing is fetched
from outside the file, so the report can be opened from a CI artifact on any machine. Pictures
read the free-form case details the suites record: ``details["placements"] =
[{pod, node, gpu, fraction}]`` and ``details["steps"] = [{state, t}]`` (``t`` in seconds).
"""

from __future__ import annotations

import hashlib
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
    step = next((s for s in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800) if span / s <= 10), 3600)
    out, t = [], 0.0
    while t <= span + 1e-9:
        out.append({"x": LABEL_W + t / span * width, "label": f"{round(t, 3):g}s"})
        t += step
    return out


def suite_timelines(suites: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One gantt per suite: its cases in run order, each bar from its start to its end."""
    out = []
    for s in suites:
        cases = s.get("cases", [])
        span = max(sum(float(c.get("seconds", 0.0)) for c in cases), 0.001)
        width = WIDTH - LABEL_W - 60
        bars, t = [], 0.0
        for i, c in enumerate(cases):
            secs = float(c.get("seconds", 0.0))
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


def gpu_allocations(suites: list[Mapping[str, Any]], cluster: Mapping[str, Any]) -> list[dict[str, Any]]:
    """For each case that recorded placements: per node a row of GPUs, each filled by the
    fractions of the pods placed on it (one colour per pod)."""
    node_gpus = {n.get("name"): int(n.get("gpus", 0)) for n in cluster.get("nodes", []) if isinstance(n, Mapping)}
    pictures = []
    for s in suites:
        for c in s.get("cases", []):
            placements = c.get("details", {}).get("placements")
            if not placements:
                continue
            by_node: dict[str, dict[int, list[tuple[str, float]]]] = {}
            for p in placements:
                gpu = int(p.get("gpu", 0))
                by_node.setdefault(str(p.get("node")), {}).setdefault(gpu, []).append(
                    (str(p.get("pod")), float(p.get("fraction", 1.0))))
            nodes = sorted(by_node)
            n_gpus = max([node_gpus.get(n, 0) for n in nodes] + [max(g.keys()) + 1 for g in by_node.values()])
            cell_w = min((WIDTH - LABEL_W - 20) / max(n_gpus, 1), 90)
            cell_h = 34
            pods = sorted({str(p.get("pod")) for p in placements})
            # Colours by position within the picture, so neighbouring pods never share one.
            colour = {pod: _PALETTE[i % len(_PALETTE)] for i, pod in enumerate(pods)}
            rows, legend = [], {}
            for r, node in enumerate(nodes):
                y = 24 + r * (cell_h + 10)
                cells = []
                for g in range(n_gpus):
                    x = LABEL_W + g * cell_w
                    segs, used = [], 0.0
                    for pod, frac in by_node[node].get(g, []):
                        # Stack fractions bottom-up; over-allocation shows as a red outline.
                        segs.append({"x": x + 2, "y": y + cell_h * (1 - min(used + frac, 1.0)),
                                     "w": cell_w - 4, "h": cell_h * min(frac, max(1.0 - used, 0.0)),
                                     "colour": colour[pod], "title": f"{pod}: {frac:g} of GPU {g} on {node}"})
                        legend[pod] = colour[pod]
                        used += frac
                    cells.append({"x": x + 2, "y": y, "w": cell_w - 4, "h": cell_h, "segs": segs, "gpu": g,
                                  "over": used > 1.0 + 1e-9, "used": f"{used:g}"})
                rows.append({"node": node, "y": y, "label_y": y + cell_h / 2 + 4, "cells": cells})
            legend_items = [{"pod": p, "colour": col} for p, col in sorted(legend.items())]
            height = 30 + len(nodes) * (cell_h + 10)
            pictures.append({"suite": s["name"], "case": c["name"], "rows": rows, "height": height,
                             "header": [{"x": LABEL_W + g * cell_w + cell_w / 2, "label": f"GPU {g}"} for g in range(n_gpus)],
                             "legend": legend_items})
    return pictures


def remediation_timelines(suites: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """One row per case that recorded remediation steps: coloured spans from each state to the next."""
    rows_in = []
    for s in suites:
        for c in s.get("cases", []):
            steps = c.get("details", {}).get("steps")
            # details are free-form: draw only well-formed [{state, t}] lists, never fail the report
            if isinstance(steps, list) and steps and all(isinstance(x, dict) and "t" in x for x in steps):
                label = f"{s['name']}/{c['name']}"
                node = c.get("details", {}).get("node")
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
            state = str(st["state"])
            legend[state] = _colour_for(state)
            spans.append({"x": LABEL_W + start / span_all * width, "w": max((end - start) / span_all * width, 2.0),
                          "colour": _colour_for(state), "title": f"{state} at +{start:.2f}s",
                          "state": state, "show": (end - start) / span_all * width > 7 * len(state)})
        rows.append({"label": label, "y": y, "spans": spans})
    return {"rows": rows, "height": 40 + len(rows) * (ROW_H + 8), "ticks": _ticks(span_all, width),
            "legend": [{"state": k, "colour": v} for k, v in legend.items()]}


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
        remediation=remediation_timelines(suites),
    )
