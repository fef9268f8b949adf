"""`certify --cluster kubeconfig=PATH`: an existing cluster is used as it is (never created or
deleted), after a preflight; an unreachable one is reported clearly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpucatalog.cli import main

pytestmark = pytest.mark.integration


def test_existing_cluster_is_used_and_left_running(
    sim_kubeconfig: Path, k8s_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main([
        "certify", "gpu-scheduling", "--cluster", f"kubeconfig={sim_kubeconfig}", "--profile", "sim",
        "--suite", "gang", "--json",
    ])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1  # KAI cannot run here: the gang suite fails at its preflight, naming why
    assert out["cluster"]["provider"] == "kubeconfig"
    assert out["cluster"]["kubernetesVersion"] == "v1.36.3"
    gang = next(s for s in out["suites"] if s["name"] == "gang")
    assert gang["cases"][0]["name"] == "preflight" and "kai-config" in gang["cases"][0]["reason"]
    # The cluster was not torn down, and the bundle was really installed into it.
    nodes = client.CoreV1Api(k8s_client).list_node().items
    assert nodes
    assert main(["uninstall", "gpu-scheduling", "--profile", "sim", "--kubeconfig", str(sim_kubeconfig)]) == 0


def test_unreachable_cluster_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    rc = main(["certify", "gpu-scheduling", "--cluster", f"kubeconfig={kc}", "--profile", "sim", "--suite", "gang",
               "--ready-timeout", "3"])
    assert rc == 2
    assert "is unreachable" in capsys.readouterr().err  # at once, not after the --ready-timeout


def test_missing_kubeconfig_and_profile_are_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certify", "gpu-scheduling", "--cluster", f"kubeconfig={tmp_path / 'nope'}", "--profile", "sim"]) == 2
    assert "kubeconfig not found" in capsys.readouterr().err
    kc = tmp_path / "k"
    kc.write_text("{}")
    assert main(["certify", "gpu-scheduling", "--cluster", f"kubeconfig={kc}"]) == 2
    assert "--profile is required" in capsys.readouterr().err
