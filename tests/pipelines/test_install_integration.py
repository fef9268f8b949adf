"""`catalog install` / `uninstall` against the sim cluster's real API server, through real helm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpucatalog.cli import main

pytestmark = pytest.mark.integration


def _queues(api: Any) -> set[str]:
    objs = client.CustomObjectsApi(api).list_cluster_custom_object("scheduling.run.ai", "v2", "queues")
    return {o["metadata"]["name"] for o in objs["items"]}


def test_install_is_gated_idempotent_and_reversible(
    sim_kubeconfig: Path, k8s_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    kc = str(sim_kubeconfig)
    # Nothing promoted: refused (exit 1) and nothing installed.
    assert main(["install", "gpu-scheduling", "--profile", "sim", "--kubeconfig", kc]) == 1
    assert "no version of gpu-scheduling is promoted" in capsys.readouterr().err
    assert main(["install", "gpu-scheduling@0.1.0", "--profile", "sim", "--kubeconfig", kc]) == 1
    assert "--allow-uncertified" in capsys.readouterr().err

    # KAI's binaries cannot run on the sim (docs/kai.md): its readiness gate names what is missing.
    gated = ["install", "gpu-scheduling@0.1.0", "--allow-uncertified", "--profile", "sim", "--kubeconfig", kc]
    assert main([*gated, "--timeout", "30"]) == 1  # room for kwok to start pods on a busy machine
    err = capsys.readouterr().err
    assert "kai-scheduler not ready after 30s" in err and "Config kai-config" in err

    args = [*gated, "--no-readiness-gate"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert "team-queues" in first and "kai-scheduler      release kai-scheduler in kai-scheduler, revision 2" in first
    assert {"research", "vision", "language", "production", "serving"} <= _queues(k8s_client)
    deps = client.AppsV1Api(k8s_client).list_namespaced_deployment("kai-scheduler").items
    assert [d.metadata.name for d in deps] == ["kai-operator"]

    assert main(args) == 0  # re-running upgrades in place: idempotent
    assert "revision 3" in capsys.readouterr().out

    assert main(["uninstall", "gpu-scheduling@0.1.0", "--profile", "sim", "--kubeconfig", kc]) == 0
    assert "team-queues, kai-scheduler" in capsys.readouterr().out
    assert not (_queues(k8s_client) & {"research", "vision"})


def _gpu_quota(api: Any, queue: str) -> int:
    q = client.CustomObjectsApi(api).get_cluster_custom_object("scheduling.run.ai", "v2", "queues", queue)
    return int(q["spec"]["resources"]["gpu"]["quota"])


def test_going_back_to_a_version_without_values_restores_the_chart_defaults(
    sim_kubeconfig: Path, k8s_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """gpu-scheduling 0.1.0 gives team-queues no values (the chart's defaults); 0.2.0 moves quotas
    and adds a team. Helm, handed no values, copies the previous release's: going back to 0.1.0
    kept 0.2.0's queues until every release was installed with --reset-values (found by the KAI
    upgrade's --rollback check)."""
    base = ["--allow-uncertified", "--profile", "sim", "--kubeconfig", str(sim_kubeconfig), "--no-readiness-gate"]
    try:
        assert main(["install", "gpu-scheduling@0.2.0", *base]) == 0
        assert _gpu_quota(k8s_client, "language") == 5 and "speech" in _queues(k8s_client)
        assert main(["install", "gpu-scheduling@0.1.0", *base]) == 0
        assert _gpu_quota(k8s_client, "language") == 4 and "speech" not in _queues(k8s_client)
    finally:
        main(["uninstall", "gpu-scheduling@0.1.0", "--profile", "sim", "--kubeconfig", str(sim_kubeconfig)])
        capsys.readouterr()


def test_dry_run_prints_plan_and_changes_nothing(sim_kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["install", "gpu-scheduling@0.1.0", "--allow-uncertified", "--dry-run", "--profile", "sim"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.index("kai-scheduler") < out.index("team-queues") and "Queue" in out


def test_install_to_unreachable_cluster_fails_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    args = ["install", "gpu-scheduling@0.1.0", "--allow-uncertified", "--profile", "sim", "--kubeconfig", str(kc), "--timeout", "5"]
    assert main(args) == 2  # bad input, checked before anything is rendered or applied
    err = capsys.readouterr().err
    assert "--kubeconfig" in err and "127.0.0.1:1" in err and "unreachable" in err
