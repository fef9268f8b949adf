"""JUnit XML from a certification predicate (the suites of one run), for CI test dashboards.

Called by ``evidence.write_evidence``. One <testsuite> per conformance suite, one <testcase> per
case; a failed case carries its reason as <failure message>, its details as <system-out>. A case
that was not run is an <error type="not-run">, not a <skipped>: every case is required, so a
dashboard must not show a run with unrun cases as green. Each <testsuite> carries its verdict
(passed, failed, incomplete) as a property.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any


def render(predicate: Mapping[str, Any]) -> str:
    suites = predicate.get("suites", [])
    prefix = f"{predicate.get('bundle', 'bundle')}.{predicate.get('profile', '')}".rstrip(".")
    root = ET.Element("testsuites", name=f"{predicate.get('bundle')}@{predicate.get('version')}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "time": 0.0}
    for s in suites:
        cases = s.get("cases", [])
        failures = sum(1 for c in cases if c.get("result") == "failed")
        not_run = sum(1 for c in cases if c.get("result") not in ("passed", "failed"))
        ts = ET.SubElement(
            root, "testsuite", name=s["name"], tests=str(len(cases)), failures=str(failures),
            errors=str(not_run), skipped="0", time=f"{float(s.get('seconds', 0.0)):.3f}",
        )
        props = ET.SubElement(ts, "properties")
        for k in ("bundle", "version", "profile"):
            ET.SubElement(props, "property", name=k, value=str(predicate.get(k, "")))
        ET.SubElement(props, "property", name="result", value=str(s.get("result", "")))
        for c in cases:
            tc = ET.SubElement(
                ts, "testcase", classname=f"{prefix}.{s['name']}", name=c["name"],
                time=f"{float(c.get('seconds', 0.0)):.3f}",
            )
            if c.get("result") == "failed":
                fail = ET.SubElement(tc, "failure", message=c.get("reason", "") or "failed")
                fail.text = c.get("reason", "")
            elif c.get("result") != "passed":
                err = ET.SubElement(tc, "error", type="not-run", message=c.get("reason", "") or "not run")
                err.text = "a required case was not run: the suite is incomplete, not passed"
            if c.get("details"):
                ET.SubElement(tc, "system-out").text = json.dumps(c["details"], sort_keys=True)
        if not cases:
            # A suite that ran no case failed (SuiteResult says so); show it as a failing case.
            tc = ET.SubElement(ts, "testcase", classname=f"{prefix}.{s['name']}", name="(no cases)", time="0")
            ET.SubElement(tc, "failure", message="suite ran no cases")
            ts.set("tests", "1")
            ts.set("failures", "1")
            failures = 1
        totals["tests"] += max(len(cases), 1)
        totals["failures"] += failures
        totals["errors"] += not_run
        totals["time"] += float(s.get("seconds", 0.0))
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", str(totals["errors"]))
    root.set("skipped", "0")
    root.set("time", f"{totals['time']:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
