"""A profile that certifies its own suites (gpu-queueing 0.4.4's ``scale``): ``show`` says so, and
asking another profile for them is refused with exit 2 naming the profile that runs them."""

from __future__ import annotations

import json

import pytest

from gpucatalog.cli import main

pytestmark = pytest.mark.toolchain  # certify renders with the pinned helm before refusing


def test_show_lists_the_profile_and_its_suites(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "gpu-queueing@0.4.4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["profileSuites"] == {"scale": ["scale"]} and "scale" not in data["suites"]
    assert main(["show", "gpu-queueing@0.4.4"]) == 0
    assert "profile scale certifies: scale (catalog certify gpu-queueing@0.4.4 --profile scale)" in capsys.readouterr().out


def test_a_suite_of_another_profile_is_refused_naming_that_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certify", "gpu-queueing@0.4.4", "--suite", "scale", "--cluster", "sim"]) == 2
    err = capsys.readouterr().err
    assert "suite(s) scale are not declared by the bundle for this profile; certify them with --profile scale" in err
    # and the scale profile does not run the bundle's other suites
    assert main(["certify", "gpu-queueing@0.4.4", "--profile", "scale", "--suite", "gang", "--cluster", "sim"]) == 2
    assert "expected scale" in capsys.readouterr().err
