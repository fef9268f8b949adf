"""scripts/policy_scan.py: reading checkov's report, matching the reviewed exceptions (reasons
required, stale ones fail), and the real checkov failing a gpu-health render whose agent lost its
probes or seccomp profile while the shipped render passes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("policy_scan", REPO / "scripts" / "policy_scan.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["policy_scan"] = mod
    spec.loader.exec_module(mod)
    return mod


ps = _load()
CHECKOV = REPO / ".venv-scan" / "bin" / "checkov"


def failure(check: str, component: str = "gpu-health", resource: str = "DaemonSet.gpu-health.gpu-health-agent") -> Any:
    return ps.Failure("b@1/sim", component, resource, check, "name")


def test_shipped_exceptions_all_have_reasons_and_parse() -> None:
    exc = ps.load_exceptions(ps.EXCEPTIONS)
    assert exc and all(len(e.reason) >= 20 for e in exc)


@pytest.mark.parametrize(("entry", "needle"), [
    ({"check": "CKV_K8S_8", "components": ["gpu-health"]}, "reason"),
    ({"check": "CKV_K8S_8", "components": ["gpu-health"], "reason": "because"}, "reason"),
    ({"check": "CKV_K8S_8", "reason": "a sentence that is long enough"}, "components"),
    ({"check": "nope", "components": ["x"], "reason": "a sentence that is long enough"}, "CKV"),
])
def test_bad_exception_entries_are_input_errors(entry: dict[str, Any], needle: str, tmp_path: Path) -> None:
    f = tmp_path / "exc.yaml"
    f.write_text(yaml.safe_dump({"exceptions": [entry]}))
    with pytest.raises(ps.InputError, match=needle):
        ps.load_exceptions(f)
    assert ps.main(["--exceptions", str(f)]) == 2


def test_matching_by_check_component_and_resource_and_stale_exceptions() -> None:
    agent_only = ps.Exception_("CKV_K8S_23", ("gpu-health",), ("DaemonSet/gpu-health-agent",), "r" * 20)
    anywhere = ps.Exception_("CKV_K8S_43", ("gpu-health",), (), "r" * 20)
    unused = ps.Exception_("CKV_K8S_20", ("gpu-health",), (), "r" * 20)
    fails = [failure("CKV_K8S_23"), failure("CKV_K8S_43"),
             failure("CKV_K8S_23", resource="Deployment.gpu-health.gpu-health-controller"),
             failure("CKV_K8S_43", component="kai-scheduler")]
    left, stale = ps.judge(fails, [agent_only, anywhere, unused])
    assert [(f.check, f.component, f.kind_name) for f in left] == [
        ("CKV_K8S_23", "gpu-health", "Deployment/gpu-health-controller"), ("CKV_K8S_43", "kai-scheduler", "DaemonSet/gpu-health-agent")]
    assert stale == [unused]


def test_report_paths_map_to_render_and_component(tmp_path: Path) -> None:
    report = {"results": {"passed_checks": [{}, {}], "failed_checks": [{
        "check_id": "CKV_K8S_8", "check_name": "Liveness", "resource": "DaemonSet.ns.agent",
        "file_path": "/x", "file_abs_path": str(tmp_path / "gpu-scheduling@0.1.0" / "sim" / "gpu-health" / "manifests.yaml")}]}}
    fails, passed = ps.failures([report], tmp_path)
    assert passed == 2
    assert fails == [ps.Failure("gpu-scheduling@0.1.0/sim", "gpu-health", "DaemonSet.ns.agent", "CKV_K8S_8", "Liveness")]


def test_identical_component_manifests_are_scanned_once(tmp_path: Path) -> None:
    def put(render: str, component: str, text: str) -> Path:
        folder = tmp_path / render / component
        folder.mkdir(parents=True)
        (folder / "manifests.yaml").write_text(text)
        return folder

    first = put("gpu-queueing@0.4.3/sim", "kueue", "kind: Deployment\n")
    same = put("gpu-queueing@0.4.4/sim", "kueue", "kind: Deployment\n")
    other = put("gpu-queueing@0.4.4/kind", "kueue", "kind: Deployment\nspec: {}\n")
    renamed = put("gpu-queueing@0.4.4/scale", "gpu-health", "kind: Deployment\n")  # same text, another component
    (tmp_path / "gpu-queueing@0.4.4" / "sim" / "bundle.lock.json").write_text("{}")
    assert ps.drop_repeats(tmp_path) == (4, 3)
    assert first.is_dir() and not same.exists() and other.is_dir() and renamed.is_dir()


@pytest.mark.skipif(not CHECKOV.is_file(), reason="checkov not installed: `make scan` creates .venv-scan")
def test_real_checkov_fails_an_agent_without_probes_or_seccomp(render_chart: Any, tmp_path: Path) -> None:
    values = yaml.safe_load((REPO / "charts" / "gpu-health" / "ci" / "sim-values.yaml").read_text())
    docs = render_chart("gpu-health", values)
    (tmp_path / "good@1" / "sim" / "gpu-health").mkdir(parents=True)
    (tmp_path / "good@1" / "sim" / "gpu-health" / "manifests.yaml").write_text(yaml.safe_dump_all(docs))
    for d in docs:
        if d["kind"] == "DaemonSet":
            spec = d["spec"]["template"]["spec"]
            spec.pop("securityContext")
            for c in spec["containers"]:
                c.pop("livenessProbe")
                c.pop("readinessProbe")
    (tmp_path / "bad@1" / "sim" / "gpu-health").mkdir(parents=True)
    (tmp_path / "bad@1" / "sim" / "gpu-health" / "manifests.yaml").write_text(yaml.safe_dump_all(docs))
    fails, _ = ps.failures(ps.scan(CHECKOV, tmp_path), tmp_path)
    left, _ = ps.judge(fails, ps.load_exceptions(ps.EXCEPTIONS))
    assert {(f.render, f.check) for f in left} == {
        ("bad@1/sim", "CKV_K8S_8"), ("bad@1/sim", "CKV_K8S_9"), ("bad@1/sim", "CKV_K8S_31"), ("bad@1/sim", "CKV_K8S_29")}
