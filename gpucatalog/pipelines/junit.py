"""JUnit XML from a certification predicate (the suites of one run), for CI test dashboards.

Called by ``evidence.write_evidence``. One <testsuite> per conformance suite, one <testcase> per
case; a failed case carries its reason as <failure message>, its details as <system-out>. A case
that was not run is an <error type="not-run">, not a <skipped>: every case is required, so a
dashboard must not show a run with unrun cases as green. Each <testsuite> carries its verdict
(passed, failed, incomplete) as a property.
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

# Characters XML 1.0 cannot hold at all (ElementTree would write them and produce a broken file).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(value: Any) -> str:
    return _NOT_XML.sub("\ufffd", str(value))


def _secs(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return out if math.isfinite(out) else 0.0


def render(predicate: Mapping[str, Any]) -> str:
    suites = predicate.get("suites", [])
    prefix = _text(f"{predicate.get('bundle', 'bundle')}.{predicate.get('profile', '')}".rstrip("."))
    root = ET.Element("testsuites", name=_text(f"{predicate.get('bundle')}@{predicate.get('version')}"))
    totals = {"tests": 0, "failures": 0, "errors": 0, "time": 0.0}
    for s in suites:
        cases = s.get("cases", [])
        failures = sum(1 for c in cases if c.get("result") == "failed")
        not_run = sum(1 for c in cases if c.get("result") not in ("passed", "failed"))
        name = _text(s.get("name", "?"))
        ts = ET.SubElement(
            root, "testsuite", name=name, tests=str(len(cases)), failures=str(failures),
            errors=str(not_run), skipped="0", time=f"{_secs(s.get('seconds', 0.0)):.3f}",
        )
        props = ET.SubElement(ts, "properties")
        for k in ("bundle", "version", "profile"):
            ET.SubElement(props, "property", name=k, value=_text(predicate.get(k, "")))
        ET.SubElement(props, "property", name="result", value=_text(s.get("result", "")))
        for c in cases:
            tc = ET.SubElement(
                ts, "testcase", classname=f"{prefix}.{name}", name=_text(c.get("name", "?")),
                time=f"{_secs(c.get('seconds', 0.0)):.3f}",
            )
            reason = _text(c.get("reason", "") or "")
            if c.get("result") == "failed":
                fail = ET.SubElement(tc, "failure", message=reason or "failed")
                fail.text = reason
            elif c.get("result") != "passed":
                err = ET.SubElement(tc, "error", type="not-run", message=reason or "not run")
                err.text = "a required case was not run: the suite is incomplete, not passed"
            if c.get("details"):
                ET.SubElement(tc, "system-out").text = _text(json.dumps(c["details"], sort_keys=True, default=str))
        if not cases:
            # A suite that ran no case failed (SuiteResult says so); show it as a failing case.
            tc = ET.SubElement(ts, "testcase", classname=f"{prefix}.{name}", name="(no cases)", time="0")
            ET.SubElement(tc, "failure", message="suite ran no cases")
            ts.set("tests", "1")
            ts.set("failures", "1")
            failures = 1
        totals["tests"] += max(len(cases), 1)
        totals["failures"] += failures
        totals["errors"] += not_run
        totals["time"] += _secs(s.get("seconds", 0.0))
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", str(totals["errors"]))
    root.set("skipped", "0")
    root.set("time", f"{totals['time']:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def failure_note(predicate: Mapping[str, Any], problem: str) -> str:
    """A JUnit file with one failing case saying the real one could not be written (the signed
    evidence next to it is complete)."""
    root = ET.Element("testsuites", name=_text(f"{predicate.get('bundle')}@{predicate.get('version')}"),
                      tests="1", failures="1", errors="0", skipped="0", time="0")
    ts = ET.SubElement(root, "testsuite", name="junit", tests="1", failures="1", errors="0", skipped="0", time="0")
    tc = ET.SubElement(ts, "testcase", classname="catalog.evidence", name="render junit.xml", time="0")
    ET.SubElement(tc, "failure", message=_text(f"junit.xml could not be rendered: {problem}; see statement.json"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
