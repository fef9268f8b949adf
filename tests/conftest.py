"""Root conftest: one sim cluster per test run (the sim's pytest plugin), one live Slurm cluster
(``tests.plugins.slurm_cluster``), the pinned helm binary with a chart renderer, and a writable
copy of the shipped catalog for tests that seed bad input into it."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.core import executor
from gpucatalog.toolchain import build

pytest_plugins = [
    "gpucatalog.clusters.sim.pytest_plugin",
    "tests.plugins.slurm_cluster",
    "tests.plugins.pipelines",
    "tests.plugins.durations",
]

REPO = Path(__file__).resolve().parents[1]
CHARTS = REPO / "charts"
KUBE_VERSION = "1.36.3"

RenderChart = Callable[..., list[dict[str, Any]]]

# Markers of tests allowed to build or run a pinned toolchain binary (helm, kubectl, go …);
# `make unit` deselects them all so it stays fast on a fresh machine.
TOOLCHAIN_MARKERS = ("toolchain", "integration", "slurm", "registry", "kind")
# Fixtures that run a toolchain binary: their users are marked ``toolchain`` automatically
# (``kubeconfig``: the conformance tests' real API server, a session fixture set up before the
# guard below could refuse its build).
TOOLCHAIN_FIXTURES = {"helm", "render_chart", "render_error", "kubeconfig"}


# `make test` runs the tests on several pytest-xdist workers (--dist loadgroup). The tests sharing
# one of these session-wide clusters form one group, so that cluster starts once per run, not once
# per worker; a file whose tests share a module fixture is one group; any other test is its own.
# Groups run one after another (tests are reordered so, serially too), and a shared cluster is
# stopped once its group's last test is done: an idle cluster still costs CPU (node heartbeats,
# gpu-health's agents) that the other workers' tests need.
SHARED_CLUSTERS = {
    "sim_cluster": "sim-cluster", "sim_kubeconfig": "sim-cluster", "k8s_client": "sim-cluster",
    "sim_namespace": "sim-cluster",
    "_gpu_health_session": "gpu-health-cluster",
    "live_cluster": "slurm-cluster",
    "kubeconfig": "api-server",  # the conformance tests' bare API server
}


def xdist_group(item: pytest.Item) -> str:
    """The worker group of ``item``: the shared cluster it uses, else its file when the file's
    tests share a module fixture, else the test alone (a test that starts its own cluster)."""
    names = set(getattr(item, "fixturenames", ()))
    shared = next((g for f, g in SHARED_CLUSTERS.items() if f in names), None)
    if shared is not None:
        return shared
    path, _, rest = item.nodeid.partition("::")
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    if any(d[-1].scope in ("module", "package", "class") for d in defs if d):
        return path
    return f"{path}::{rest}".replace("@", "_")  # xdist splits a group off the node id at its last '@'


def _timeout(item: pytest.Item) -> float:
    mark = item.get_closest_marker("timeout")
    return float(mark.args[0]) if mark is not None and mark.args else 0.0


# Each test's seconds in a recent whole run (`make test` writes them to build/test-durations.json;
# refreshed here with DEVELOPMENT.md's table). A test not in it is guessed from its timeout marker.
DURATIONS = Path(__file__).with_name("durations.json")


def _expected(item: pytest.Item, known: dict[str, float]) -> float:
    seconds = known.get(item.nodeid)
    return seconds if seconds is not None else max(1.0, 0.1 * _timeout(item))


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups off the items
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    known: dict[str, float] = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    first: dict[str, int] = {}
    expected: dict[str, float] = defaultdict(float)
    for i, item in enumerate(items):
        if TOOLCHAIN_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.toolchain)
        group = xdist_group(item)
        first.setdefault(group, i)
        expected[group] += _expected(item, known)
        item.add_marker(pytest.mark.xdist_group(group))
    # the longest groups first: a worker that takes a long one last leaves the others idle while
    # it runs; stable, so the file order holds within a group
    items.sort(key=lambda it: (-expected[_group_of(it)], first[_group_of(it)]))


def _group_of(item: pytest.Item) -> str:
    """The group collection gave ``item`` (its ``xdist_group`` marker)."""
    mark = item.get_closest_marker("xdist_group")
    return str(mark.args[0]) if mark is not None and mark.args else xdist_group(item)


@pytest.hookimpl(trylast=True)  # after xdist's worker has tagged each item with its group
def pytest_collection_finish(session: pytest.Session) -> None:
    if getattr(session.config.option, "loadgroup", False) and session.items and "@" not in session.items[0].nodeid:
        raise pytest.UsageError("pytest-xdist did not apply the test groups (--dist loadgroup): each worker "
                                "would start every shared cluster; install the pytest of pyproject.toml's dev extra")


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last test of a shared cluster's group on this worker, stop that cluster (its
    session fixture is finished early; a later user would simply start it again)."""
    group = _group_of(item)
    if nextitem is not None and _group_of(nextitem) == group:
        return
    info = getattr(item, "_fixtureinfo", None)
    request = getattr(item, "_request", None)
    if info is None or request is None:
        return
    for name, shared in SHARED_CLUSTERS.items():
        if shared != group:
            continue
        for fixturedef in info.name2fixturedefs.get(name, ()):
            if fixturedef.scope == "session" and fixturedef.cached_result is not None:
                fixturedef.finish(request)


@pytest.fixture(autouse=True)
def _toolchain_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test without one of TOOLCHAIN_MARKERS that reaches for a pinned tool fails, naming the
    marker to add, instead of silently making `make unit` slow."""
    if any(request.node.get_closest_marker(m) for m in TOOLCHAIN_MARKERS):
        return

    def refuse(*_: object, **__: object) -> Path:
        raise AssertionError(f"{request.node.nodeid} builds or runs a pinned tool: mark it @pytest.mark.toolchain")

    for name in ("ensure", "ensure_all", "build_group", "module_dir"):
        monkeypatch.setattr(build, name, refuse)


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """``catalog/`` and ``charts/`` copied into a temp folder; returns the copied ``catalog/``."""
    shutil.copytree(REPO / "catalog", tmp_path / "catalog")
    shutil.copytree(REPO / "charts", tmp_path / "charts")
    return tmp_path / "catalog"


@pytest.fixture(scope="session")
def helm() -> Path:
    """The pinned helm binary (built once and cached by version; tests using it are ``toolchain``)."""
    return build.ensure("helm")


def helm_template(
    helm: Path, chart: str, values: dict[str, Any] | None = None, *extra: str, set_json: Sequence[str] = ()
) -> str:
    """``helm template`` of one of this repo's charts; ``values`` go in on stdin, ``set_json`` as
    ``--set-json`` flags. Raises ``ToolError`` (with helm's stderr) when helm refuses."""
    argv = [str(helm), "template", chart, str(CHARTS / chart), "--namespace", chart,
            "--kube-version", KUBE_VERSION, *extra]
    for s in set_json:
        argv += ["--set-json", s]
    stdin = None
    if values is not None:
        argv += ["--values", "-"]
        stdin = yaml.safe_dump(values)
    return executor.run(argv, input=stdin).stdout


@pytest.fixture(scope="session")
def render_chart(helm: Path) -> RenderChart:
    """Render a chart of ``charts/`` with real helm and return its documents (empty ones dropped):
    ``render_chart("slurm", {"nodesets": …})``, ``render_chart("slurm", set_json=['a={"b":1}'])``."""

    def render(chart: str, values: dict[str, Any] | None = None, *extra: str, set_json: Sequence[str] = ()) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all(helm_template(helm, chart, values, *extra, set_json=set_json)) if d]

    return render
