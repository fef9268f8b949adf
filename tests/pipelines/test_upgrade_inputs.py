"""``catalog certify B@NEW --upgrade-from OLD``: what is caught before any cluster starts. Bad
input exits 2 naming the object and field; an upgrade Kubernetes would reject (an immutable
field changed) is a failed certification (exit 1) without a cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpucatalog.cli import main

pytestmark = pytest.mark.toolchain  # renders with the pinned helm

SIM = "      cluster: {provider: sim, nodes: 4, shape: h100-80gb-x8}\n"


def breaking(repo_copy: Path, patches: str, drop_component: str = "") -> None:
    """gpu-queueing 0.3.0: 0.2.0 with ``patches`` (a kustomize block) on its sim profile."""
    src = (repo_copy / "bundles" / "gpu-queueing" / "0.2.0.yaml").read_text()
    text = src.replace("version: 0.2.0}", "version: 0.3.0}").replace(SIM, SIM + patches, 1)
    if drop_component:
        doc = yaml.safe_load(text)
        doc["spec"]["components"] = [c for c in doc["spec"]["components"] if c["name"] != drop_component]
        for prof in doc["spec"]["profiles"].values():
            prof.get("values", {}).pop(drop_component, None)
        text = yaml.safe_dump(doc, sort_keys=False)
    assert text != src
    (repo_copy / "bundles" / "gpu-queueing" / "0.3.0.yaml").write_text(text)


def certify(repo_copy: Path, *args: str) -> int:
    return main(["--catalog-dir", str(repo_copy), "certify", "gpu-queueing@0.3.0", "--cluster", "sim",
                 "--cluster-name", "never-started", *args])


def test_old_that_is_no_version_or_channel_and_rollback_alone(repo_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    breaking(repo_copy, "")
    assert certify(repo_copy, "--upgrade-from", "0.0.9") == 2
    err = capsys.readouterr().err
    assert "gpu-queueing@0.0.9 is neither a version of gpu-queueing nor a channel" in err
    assert "0.1.0, 0.2.0, 0.3.0" in err and "stable" in err and "--upgrade-from" in err
    assert certify(repo_copy, "--rollback") == 2
    assert "--rollback needs --upgrade-from" in capsys.readouterr().err
    # an empty value (an unset CI variable) is refused, never a plain certification
    for empty in ("", " "):
        assert certify(repo_copy, "--upgrade-from", empty) == 2
        assert "error: --upgrade-from: the value is empty" in capsys.readouterr().err


def test_crd_dropping_a_field_in_use_is_bad_input(repo_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # v1beta2 (versions[1]) of Kueue's ClusterQueue loses spec.cohortName, which every team sets
    breaking(repo_copy, """      kustomize:
        kueue:
          patches:
            - target: {kind: CustomResourceDefinition, name: clusterqueues.kueue.x-k8s.io}
              patch: |
                - op: remove
                  path: /spec/versions/1/schema/openAPIV3Schema/properties/spec/properties/cohortName
""")
    assert certify(repo_copy, "--upgrade-from", "0.1.0") == 2
    err = capsys.readouterr().err
    assert "[upgrade-crd-field-removed]" in err and "spec.cohortName" in err and "ClusterQueue vision" in err
    assert "starting sim cluster" not in err


def test_dropping_a_component_that_holds_objects_is_bad_input(repo_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    breaking(repo_copy, "", drop_component="gpu-health")
    assert certify(repo_copy, "--upgrade-from", "0.1.0") == 2
    err = capsys.readouterr().err
    assert "[upgrade-component-removed]" in err and "drops component gpu-health" in err
    assert "starting sim cluster" not in err


def test_changed_selector_fails_before_any_cluster(repo_copy: Path, capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    breaking(repo_copy, """      kustomize:
        kueue:
          patches:
            - target: {kind: Deployment, name: kueue-controller-manager}
              patch: |
                - op: add
                  path: /spec/selector/matchLabels/tier
                  value: control
                - op: add
                  path: /spec/template/metadata/labels/tier
                  value: control
""")
    assert certify(repo_copy, "--upgrade-from", "0.1.0", "--evidence", str(tmp_path / "ev"), "--json") == 1
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert [s["name"] for s in out["suites"]] == ["static"]
    reason = out["suites"][0]["cases"][0]["reason"]
    assert "[upgrade-immutable-field]" in reason
    assert "Deployment kueue-system/kueue-controller-manager changes spec.selector" in reason
    assert "starting sim cluster" not in captured.err
    assert (tmp_path / "ev" / "evidence.dsse.json").is_file()  # a failed certification still has evidence
    # catalog diff says the same, and exits 1
    assert main(["--catalog-dir", str(repo_copy), "diff", "gpu-queueing@0.1.0", "gpu-queueing@0.3.0", "--risks-only"]) == 1
    assert "REFUSED [upgrade-immutable-field]" in capsys.readouterr().out


def test_renamed_cluster_queue_fails_before_any_cluster(repo_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # moving LocalQueue vision to the renamed ClusterQueue is a change Kueue's webhook refuses
    breaking(repo_copy, RENAME_CQ)
    assert certify(repo_copy, "--upgrade-from", "0.1.0", "--json") == 1
    out = json.loads(capsys.readouterr().out)
    reason = out["suites"][0]["cases"][0]["reason"]
    assert "LocalQueue vision/vision changes spec.clusterQueue ('vision' -> 'vision-v2')" in reason


RENAME_CQ = """      kustomize:
        team-queues:
          patches:
            - target: {kind: ClusterQueue, name: vision}
              patch: |
                - op: replace
                  path: /metadata/name
                  value: vision-v2
            - target: {kind: LocalQueue, name: vision}
              patch: |
                - op: replace
                  path: /spec/clusterQueue
                  value: vision-v2
"""
