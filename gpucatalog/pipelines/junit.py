"""JUnit XML from a certification predicate (the suites of one run), for CI test dashboards.

Called by ``evidence.write_evidence``. One <testsuite> per conformance suite, one <testcase> per
case; a failed case carries its reason as <failure message>, its details as <system-out>.
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
    totals = {"tests": 0, "failures": 0, "skipped": 0, "time": 0.0}
    for s in suites:
        cases = s.get("cases", [])
        failures = sum(1 for c in cases if c.get("result") == "failed")
        skipped = sum(1 for c in cases if c.get("result") == "skipped")
        ts = ET.SubElement(
            root, "testsuite", name=s["name"], tests=str(len(cases)), failures=str(failures),
            errors="0", skipped=str(skipped), time=f"{float(s.get('seconds', 0.0)):.3f}",
        )
        props = ET.SubElement(ts, "properties")
        for k in ("bundle", "version", "profile"):
            ET.SubElement(props, "property", name=k, value=str(predicate.get(k, "")))
        for c in cases:
            tc = ET.SubElement(
                ts, "testcase", classname=f"{prefix}.{s['name']}", name=c["name"],
                time=f"{float(c.get('seconds', 0.0)):.3f}",
            )
            if c.get("result") == "failed":
                fail = ET.SubElement(tc, "failure", message=c.get("reason", "") or "failed")
                fail.text = c.get("reason", "")
            elif c.get("result") == "skipped":
                ET.SubElement(tc, "skipped", message=c.get("reason", ""))
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
        totals["skipped"] += skipped
        totals["time"] += float(s.get("seconds", 0.0))
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", "0")
    root.set("skipped", str(totals["skipped"]))
    root.set("time", f"{totals['time']:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
