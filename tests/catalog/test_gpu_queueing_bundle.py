"""The gpu-queueing bundle's bad inputs, caught by `catalog validate` before anything is installed,
each naming the field: a flavor for a GPU product no node shape has, a LocalQueue pointing at a
missing ClusterQueue, and department quotas Kueue's cohorts cannot express."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog.cli import main

pytestmark = pytest.mark.toolchain  # renders with the pinned helm


def _add_profile(repo_copy: Path, text: str) -> None:
    bundle = repo_copy / "bundles" / "gpu-queueing" / "0.1.0.yaml"
    bundle.write_text(bundle.read_text() + text)


def _validate(repo_copy: Path, profile: str) -> int:
    return main(["--catalog-dir", str(repo_copy), "validate", "gpu-queueing@0.1.0", "--profile", profile, "--no-lint"])


def test_flavor_for_a_gpu_product_no_shape_has(repo_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _add_profile(repo_copy, """    b200:
      description: a GPU product the node shapes do not know
      cluster: {provider: sim, nodes: 2, shape: h100-80gb-x8}
      values:
        team-queues:
          kueue:
            flavors: [{name: b200, gpuProduct: NVIDIA-B200}]
""")
    assert _validate(repo_copy, "b200") == 1
    err = capsys.readouterr().err
    assert "[kueue-flavor-gpu-product] team-queues/ResourceFlavor/b200 spec.nodeLabels[nvidia.com/gpu.product]" in err
    assert "[kueue-no-flavor-for-shape]" in err and "NVIDIA-H100-80GB-HBM3" in err


def test_local_queue_pointing_at_a_missing_cluster_queue(repo_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _add_profile(repo_copy, """    broken:
      description: a LocalQueue retargeted through a kustomize overlay
      cluster: {provider: sim, nodes: 2, shape: h100-80gb-x8}
      kustomize:
        team-queues:
          patches:
            - target: {kind: LocalQueue, name: vision}
              patch: |
                - op: replace
                  path: /spec/clusterQueue
                  value: visoin
""")
    assert _validate(repo_copy, "broken") == 1
    err = capsys.readouterr().err
    assert "[kueue-unknown-clusterqueue] team-queues/LocalQueue/vision/vision spec.clusterQueue" in err
    assert "'visoin' is not a ClusterQueue of the bundle" in err


def test_department_quota_cohorts_cannot_express_is_bad_input(repo_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _add_profile(repo_copy, """    mixed:
      description: one department capped over teams on two GPU products
      cluster: {provider: sim, nodes: 2, shape: h100-80gb-x8}
      values:
        team-queues:
          departments:
            - name: research
              gpu: {quota: 8, limit: 12}
              teams:
                - {name: vision, gpu: {quota: 4}}
                - {name: language, gpu: {quota: 4}}
          kueue:
            flavors: [{name: h100, gpuProduct: NVIDIA-H100-80GB-HBM3}, {name: h200, gpuProduct: NVIDIA-H200}]
            teamFlavors: {language: h200}
""")
    assert _validate(repo_copy, "mixed") == 2
    err = capsys.readouterr().err
    assert "departments[0] (research).gpu.limit cannot be expressed as a Kueue cohort" in err
