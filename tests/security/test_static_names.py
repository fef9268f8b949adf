"""A bundle value the API server would reject at install time fails ``validate`` (exit 1): a
priorityClassName that is not a DNS subdomain (issue 14: names validated by static checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog.cli import main

pytestmark = pytest.mark.toolchain  # renders with the pinned helm


def test_bad_priority_class_name_in_bundle_values_fails_validate(repo_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = repo_copy / "bundles" / "gpu-scheduling" / "0.1.0.yaml"
    f.write_text(f.read_text().replace('priorityClassName: ""', 'priorityClassName: "Not_A_Valid/Name"'))
    assert main(["--catalog-dir", str(repo_copy), "validate", "gpu-scheduling@0.1.0", "--profile", "sim", "--no-lint"]) == 1
    err = capsys.readouterr().err
    assert "[priority-class-name] gpu-health/DaemonSet" in err and "Not_A_Valid/Name" in err
