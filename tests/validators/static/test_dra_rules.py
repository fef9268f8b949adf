"""DRA claim rules: a claim naming a missing DeviceClass, a capacity in wrong units and a
partition profile the target's GPUs do not offer are findings naming the object and field, from
the rule alone and through ``catalog validate`` of a bundle whose driver component renders them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpucatalog.cli import main
from gpucatalog.validators.static import dra_rules

CLASSES = [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": n}}
           for n in ("gpu.nvidia.com", "mig.nvidia.com")]


def _template(name: str, exactly: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}


def _profile(p: str) -> dict[str, Any]:
    return {"cel": {"expression": f'device.attributes["gpu.nvidia.com"].profile == "{p}"'}}


def test_good_claims_have_no_findings() -> None:
    objs = [*CLASSES,
            _template("half", {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "40Gi"}}}),
            _template("mig", {"deviceClassName": "mig.nvidia.com", "selectors": [_profile("1g.10gb")]})]
    assert dra_rules.check(objs, {"1g.10gb", "7g.80gb"}) == []


def test_each_bad_input_names_its_field() -> None:
    objs = [*CLASSES,
            _template("no-class", {"deviceClassName": "gpu.nvidia.comm"}),
            _template("units", {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "40GB"}}}),
            _template("bytes", {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "40"}}}),
            _template("profile", {"deviceClassName": "mig.nvidia.com", "selectors": [_profile("1g.18gb")]})]
    found = {(f.rule, f.obj, f.field) for f in dra_rules.check(objs, {"1g.10gb"}, component="c")}
    base = "spec.spec.devices.requests[0].exactly"
    assert found == {
        ("dra-unknown-deviceclass", "ResourceClaimTemplate/team-a/no-class", f"{base}.deviceClassName"),
        ("dra-capacity-units", "ResourceClaimTemplate/team-a/units", f"{base}.capacity.requests.memory"),
        ("dra-capacity-units", "ResourceClaimTemplate/team-a/bytes", f"{base}.capacity.requests.memory"),
        ("dra-unknown-profile", "ResourceClaimTemplate/team-a/profile", f"{base}.selectors[0].cel.expression"),
    }


@pytest.mark.toolchain
@pytest.mark.parametrize("version", ["0.2.0", "0.3.0"])  # NVIDIA's 25.8.0 chart, then the kubernetes-sigs 0.5.0 one
def test_validate_names_bad_claim_templates_of_the_bundle(repo_copy: Path, capsys: pytest.CaptureFixture[str],
                                                          version: str) -> None:
    bundle = repo_copy / "bundles" / "gpu-queueing" / f"{version}.yaml"
    bundle.write_text(bundle.read_text() + """    broken-dra:
      description: claim templates a user got wrong
      cluster: {provider: kubeconfig, shape: h100-80gb-x8}
      values:
        nvidia-dra-driver:
          claimTemplates:
            - {name: no-class, namespace: default, deviceClassName: gpu.nvidia.comm}
            - {name: units, namespace: default, deviceClassName: gpu.nvidia.com, memory: 40GB}
            - {name: h200-profile, namespace: default, deviceClassName: mig.nvidia.com, profile: 1g.18gb}
""")
    rc = main(["--catalog-dir", str(repo_copy), "validate", f"gpu-queueing@{version}", "--profile", "broken-dra",
               "--no-lint"])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "dra-unknown-deviceclass" in err and "ResourceClaimTemplate/default/no-class" in err
    assert "dra-capacity-units" in err and "capacity.requests.memory" in err and "40GB" in err
    assert "dra-unknown-profile" in err and "1g.18gb" in err
