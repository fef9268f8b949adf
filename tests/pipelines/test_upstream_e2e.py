"""The verdict of ``make upstream-e2e`` from Ginkgo's JUnit report (the format as Kueue's suite
writes it: label-filtered specs are "skipped" with the bare message "skipped") and the known
differences docs/upstream-e2e.md lists. The live run itself is ``make upstream-e2e``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog.core import errors
from gpucatalog.pipelines import upstream_e2e

REPO = Path(__file__).resolve().parents[2]


def _case(name: str, status: str, body: str = "") -> str:
    return f'<testcase name="{name}" classname="End To End Suite" status="{status}" time="1.5">{body}</testcase>'


def _junit(tmp_path: Path, *cases: str) -> Path:
    path = tmp_path / "junit.xml"
    path.write_text('<?xml version="1.0" encoding="UTF-8"?><testsuites><testsuite name="End To End Suite">'
                    + "".join(cases) + "</testsuite></testsuites>")
    return path


def _specs(tmp_path: Path, passed: int, failed: list[str], setup: str = "passed") -> list[upstream_e2e.SpecResult]:
    cases = [_case("[BeforeSuite]", setup, '<failure message="no Kueue">x</failure>' if setup == "failed" else "")]
    cases += [_case(f"[It] spec {i} [feature:job]", "passed") for i in range(passed)]
    cases += [_case(name, "failed", '<failure message="Timed out after 90.000s.">x</failure>') for name in failed]
    cases += [_case("[It] JAX integration [feature:jaxjob]", "skipped", '<skipped message="skipped"></skipped>'),
              _case("[It] needs a GPU [feature:job]", "skipped", '<skipped message="skipped - no GPU here"></skipped>')]
    return upstream_e2e.parse_junit(_junit(tmp_path, *cases))


def test_the_report_is_read_spec_by_spec(tmp_path: Path) -> None:
    specs = _specs(tmp_path, 2, ["[It] Pod groups should preempt [feature:pod]"])
    states = {s.name: s.state for s in specs}
    assert states["[It] JAX integration [feature:jaxjob]"] == "filtered"  # left out by the label filter
    assert states["[It] needs a GPU [feature:job]"] == "skipped"  # skipped by the spec itself
    failed = next(s for s in specs if s.state == "failed")
    assert failed.message == "Timed out after 90.000s." and failed.seconds == 1.5


def test_enough_passed_and_every_failure_known_passes(tmp_path: Path) -> None:
    bad = "[It] Pod groups should preempt [feature:pod]"
    specs = _specs(tmp_path, 19, [bad])  # 19 of 20: 95 %
    assert not upstream_e2e.judge(specs, {}).ok  # a failure nobody explained
    verdict = upstream_e2e.judge(specs, {bad: "the sim runs no X"})
    assert verdict.ok and verdict.share == 0.95 and len(verdict.ran) == 20
    text = upstream_e2e.report(specs, {bad: "the sim runs no X"}, verdict)
    assert "19 of 20 specs passed (95.0%); 1 skipped by the spec itself" in text
    assert f"| {bad} | failed (known: the sim runs no X) | 1.5 |" in text
    assert "JAX" not in text  # what the filter left out is not part of the run


def test_too_few_passing_or_a_failed_suite_node_fails(tmp_path: Path) -> None:
    bad = [f"[It] failing {i} [feature:pod]" for i in range(2)]
    assert not upstream_e2e.judge(_specs(tmp_path, 18, bad), dict.fromkeys(bad, "known")).ok  # 90 %
    setup_failed = upstream_e2e.judge(_specs(tmp_path, 5, [], setup="failed"), {"[BeforeSuite]": "known"})
    assert not setup_failed.ok and [s.name for s in setup_failed.unexplained] == ["[BeforeSuite]"]
    assert not upstream_e2e.judge(_specs(tmp_path, 0, []), {}).ok  # nothing ran


def test_an_rbac_denial_in_kueues_log_fails_a_run_whose_specs_passed(tmp_path: Path) -> None:
    verdict = upstream_e2e.judge(_specs(tmp_path, 20, []), {})
    assert verdict.ok
    denied = upstream_e2e.dataclasses.replace(verdict, log_findings=("1 log line(s) of kueue match a fatal pattern",))
    assert not denied.ok
    assert "Kueue's log: 1 log line(s) of kueue match" in upstream_e2e.report([], {}, denied)


def test_an_unreadable_report_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "junit.xml").write_text("<testsuites>")
    with pytest.raises(errors.InputError, match=r"junit\.xml: not a readable JUnit report"):
        upstream_e2e.parse_junit(tmp_path / "junit.xml")


def test_known_differences_are_read_from_their_section_only(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("# title\n\n- `[It] elsewhere`: not this section\n\n## Known differences\n\n"
                   "- `[It] Pod groups should preempt [feature:pod]`: exec'd curl is not there\n\n## Results\n"
                   "- `[It] later`: not this one either\n")
    assert upstream_e2e.known_differences(doc) == {"[It] Pod groups should preempt [feature:pod]": "exec'd curl is not there"}
    # the shipped doc parses, and whatever it lists names a spec of the selected features
    for name in upstream_e2e.known_differences(REPO / "docs" / "upstream-e2e.md"):
        assert name.startswith("[It] ") and "feature:" in name, name


def test_the_worker_labels_of_kueues_kind_cluster_are_read_in_order(tmp_path: Path) -> None:
    cfg = tmp_path / "hack" / "testing" / "kind-cluster.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("kind: Cluster\nnodes:\n- role: control-plane\n- role: worker\n  labels: {instance-type: on-demand}\n"
                   "- role: worker\n  labels: {instance-type: spot}\n- role: worker\n")
    assert upstream_e2e.worker_labels(tmp_path) == [{"instance-type": "on-demand"}, {"instance-type": "spot"}, {}]
