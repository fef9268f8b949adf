"""The compatibility matrix from small certification results: statuses read back from signed
evidence (never from the run's own answer), a build failure that stops one cell only, the cache
per digest x release, and the files with a link per cell. The certification is replaced by a
function that writes real signed evidence, as certify would; no cluster, no Helm."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gpucatalog.cli import matrix as matrix_cli
from gpucatalog.core import errors
from gpucatalog.pipelines import certify, evidence, keys, matrix, matrix_files

DIGEST = "sha256:" + "c3" * 32
RANGES = (("kueue v0.17.0", ">=1.29.0 <1.37.0"), ("gpu-health 0.1.0", ">=1.28.0 <1.37.0"))
ALL = ["v1.34.4", "v1.35.4", "v1.36.3", "v1.37.2"]


def _passing() -> list[dict[str, Any]]:
    return [{"name": "gang", "cases": [{"name": "all-or-nothing", "result": "passed"}]}]


class FakeCertify:
    """Writes the signed evidence certify would, with the suites given per release."""

    def __init__(self, key: Path, suites: dict[str, list[dict[str, Any]]], digest: str = DIGEST,
                 claim: str = "") -> None:
        self.key, self.suites, self.digest, self.claim = key, suites, digest, claim
        self.calls: list[str] = []
        self.image_maps: list[Path | None] = []

    def __call__(self, o: certify.Options) -> object:
        assert o.kubernetes is not None and o.evidence_dir is not None and o.cluster == "sim"
        self.calls.append(o.kubernetes)
        self.image_maps.append(o.image_map)
        cluster: dict[str, Any] = {"provider": "sim", "kubernetesVersion": o.kubernetes}
        if o.outside_range:
            cluster.update(exploratory=True, outsideRange=["kueue v0.17.0 supports Kubernetes >=1.29.0 <1.37.0"])
        name, _, version = o.bundle.partition("@")
        st = evidence.build_statement(
            bundle=name, version=version, profile="sim", digest=self.digest, cluster=cluster, tools={},
            suites=self.suites.get(o.kubernetes, _passing()), started=time.time() - 3, finished=time.time(),
            exploratory=o.outside_range)
        if self.claim:
            st["predicate"]["result"] = self.claim  # a summary that lies about its cases
        evidence.write_evidence(o.evidence_dir, st, self.key)
        return None


@pytest.fixture
def key(tmp_path: Path) -> keys.GeneratedKey:
    return keys.generate(tmp_path / "keys", "matrix")


def _opts(tmp_path: Path, key: keys.GeneratedKey, kube: list[str] | None = None, **kw: Any) -> matrix.Options:
    pub = keys.load_public(key.public_path)
    return matrix.Options(bundles=["gpu-queueing@0.1.0"], kubernetes=kube or ALL, out_dir=tmp_path / "m",
                          signing_key=key.private_path, trusted={keys.keyid(pub): pub}, **kw)


TARGET = matrix.Target("gpu-queueing", "0.1.0", DIGEST, RANGES)


def _run(opts: matrix.Options, fake: FakeCertify, broken: tuple[str, ...] = ()) -> list[matrix.Cell]:
    def ensure(release: str) -> None:
        if release in broken:
            raise errors.ToolError(["go", "build", "k8s.io/kubernetes/cmd/kube-apiserver"], 1, "undefined: foo")
    return matrix.run_targets([TARGET], opts, lambda _m: None, certify_cell=fake, ensure=ensure)


def test_each_status_comes_from_the_signed_evidence(tmp_path: Path, key: keys.GeneratedKey) -> None:
    fake = FakeCertify(key.private_path, {
        "v1.35.4": [{"name": "gang", "cases": [
            {"name": "all-or-nothing", "result": "passed"},
            {"name": "partial-gang", "result": "failed", "reason": "the API server has no v1beta1 PodGroup"},
            {"name": "later", "result": "failed", "reason": "second"}]}],
        "v1.36.3": [{"name": "gang", "cases": [{"name": "all-or-nothing", "result": "skipped", "reason": "no GPUs"}]}],
    })
    cells = _run(_opts(tmp_path, key), fake, broken=("v1.34.4",))
    by = {c.kubernetes: c for c in cells}
    assert by["v1.34.4"].status == "not-run" and "undefined: foo" in by["v1.34.4"].detail
    assert by["v1.35.4"].status == "failed"
    assert by["v1.35.4"].detail == "gang/partial-gang: the API server has no v1beta1 PodGroup"
    assert by["v1.36.3"].status == "incomplete" and by["v1.36.3"].detail.startswith("gang/all-or-nothing")
    assert by["v1.37.2"].status == "outside-range" and "<1.37.0" in by["v1.37.2"].detail
    assert fake.calls == ["v1.35.4", "v1.36.3"]  # the build failure stopped only its own cell
    assert by["v1.35.4"].evidence == "cells/gpu-queueing/0.1.0/1.35"
    assert by["v1.35.4"].signer and by["v1.35.4"].digest == DIGEST


def test_a_summary_that_lies_does_not_make_a_cell_green(tmp_path: Path, key: keys.GeneratedKey) -> None:
    fake = FakeCertify(key.private_path, {"v1.36.3": [{"name": "gang", "cases": [
        {"name": "c", "result": "failed", "reason": "x"}]}]}, claim="passed")
    (cell,) = _run(_opts(tmp_path, key, ["v1.36.3"]), fake)
    assert cell.status == "failed"


def test_evidence_from_an_untrusted_key_is_never_green(tmp_path: Path, key: keys.GeneratedKey) -> None:
    rogue = keys.generate(tmp_path / "rogue", "rogue")
    (cell,) = _run(_opts(tmp_path, key, ["v1.36.3"]), FakeCertify(rogue.private_path, {}))
    assert cell.status == "unverified" and "signature" in cell.detail.lower()


def test_tampered_evidence_is_unverified_then_rerun(tmp_path: Path, key: keys.GeneratedKey) -> None:
    opts = _opts(tmp_path, key, ["v1.36.3"])
    fake = FakeCertify(key.private_path, {})
    (cell,) = _run(opts, fake)
    assert cell.status == "passed"
    env_path = opts.out_dir / cell.evidence / evidence.ENVELOPE
    env = json.loads(env_path.read_text())
    env["payload"] = env["payload"][:-8] + "AAAAAAA="
    env_path.write_text(json.dumps(env))
    assert matrix.read_cell(env_path.parent, opts.out_dir, TARGET, "v1.36.3", opts.trusted).status == "unverified"
    (again,) = _run(opts, fake)  # not trusted as a cache: run again
    assert again.status == "passed" and not again.cached and fake.calls == ["v1.36.3", "v1.36.3"]


def test_an_unchanged_cell_is_not_run_again(tmp_path: Path, key: keys.GeneratedKey) -> None:
    opts = _opts(tmp_path, key, ["v1.35.4", "v1.36.3"])
    fake = FakeCertify(key.private_path, {})
    first = _run(opts, fake)
    assert [c.cached for c in first] == [False, False] and len(fake.calls) == 2
    second = _run(opts, fake)
    assert [c.cached for c in second] == [True, True] and len(fake.calls) == 2
    assert [c.status for c in second] == ["passed", "passed"]
    # another rendering (digest) of the bundle: every cell runs again
    changed = matrix.Target("gpu-queueing", "0.1.0", "sha256:" + "d4" * 32, RANGES)
    fake2 = FakeCertify(key.private_path, {}, digest=changed.digest)
    cells = matrix.run_targets([changed], opts, lambda _m: None, certify_cell=fake2, ensure=lambda _r: None)
    assert fake2.calls == ["v1.35.4", "v1.36.3"] and all(c.status == "passed" for c in cells)
    # --rerun runs even a valid cell
    opts.rerun = True
    matrix.run_targets([changed], opts, lambda _m: None, certify_cell=fake2, ensure=lambda _r: None)
    assert len(fake2.calls) == 4


def test_a_half_written_cell_is_resumed(tmp_path: Path, key: keys.GeneratedKey) -> None:
    opts = _opts(tmp_path, key, ["v1.36.3"])
    folder = matrix.cell_dir(opts.out_dir, TARGET, "v1.36.3")
    folder.mkdir(parents=True)
    (folder / evidence.STATEMENT).write_text("{}")  # interrupted before the envelope was written
    fake = FakeCertify(key.private_path, {})
    (cell,) = _run(opts, fake)
    assert cell.status == "passed" and fake.calls == ["v1.36.3"]


def test_outside_range_probe_is_exploratory(tmp_path: Path, key: keys.GeneratedKey) -> None:
    opts = _opts(tmp_path, key, ["v1.37.2"], outside_range=True)
    (cell,) = _run(opts, FakeCertify(key.private_path, {}))
    assert cell.status == "outside-range" and cell.exploratory == "passed" and "probed: passed" in cell.detail
    # shown again from its evidence without a probe asked for
    opts.outside_range = False
    (again,) = _run(opts, FakeCertify(key.private_path, {}))
    assert again.cached and again.exploratory == "passed"


def test_every_cell_runs_with_the_image_map_given(tmp_path: Path, key: keys.GeneratedKey) -> None:
    overlay = tmp_path / "kai-images.yaml"  # gpu-scheduling's cells, with KAI binaries the user built
    fake = FakeCertify(key.private_path, {})
    _run(_opts(tmp_path, key, ["v1.35.4", "v1.36.3"], image_map=overlay), fake)
    assert fake.image_maps == [overlay, overlay]


def test_no_run_reports_missing_cells_as_not_run(tmp_path: Path, key: keys.GeneratedKey) -> None:
    opts = _opts(tmp_path, key, ["v1.36.3"], run=False)
    fake = FakeCertify(key.private_path, {})
    (cell,) = _run(opts, fake)
    assert cell.status == "not-run" and fake.calls == []


def test_files_link_every_cell_to_its_evidence(tmp_path: Path, key: keys.GeneratedKey) -> None:
    opts = _opts(tmp_path, key)
    fake = FakeCertify(key.private_path, {"v1.35.4": [{"name": "gang", "cases": [
        {"name": "c", "result": "failed", "reason": "<script>x</script>"}]}]})
    cells = _run(opts, fake, broken=("v1.34.4",))
    doc = json.loads((opts.out_dir / matrix_files.JSON).read_text())
    assert doc["kind"] == "CompatibilityMatrix" and len(doc["cells"]) == 4
    assert {c["minor"]: c["status"] for c in doc["cells"]} == {
        "1.34": "not-run", "1.35": "failed", "1.36": "passed", "1.37": "outside-range"}
    md = (opts.out_dir / matrix_files.MARKDOWN).read_text()
    assert "[✅ passed](cells/gpu-queueing/0.1.0/1.36/report.html)" in md
    assert "(cells/gpu-queueing/0.1.0/1.36/evidence.dsse.json)" in md
    assert "Kubernetes 1.34 (v1.34.4)" in md and "undefined: foo" in md
    page = (opts.out_dir / matrix_files.HTML).read_text()
    assert "<script>x" not in page and "&lt;script&gt;" in page
    for c in cells:
        if c.evidence:
            assert (opts.out_dir / c.evidence / evidence.ENVELOPE).is_file()
            assert (opts.out_dir / c.evidence / evidence.REPORT).is_file()


def test_exit_status_counts_what_is_short(tmp_path: Path) -> None:
    assert set(matrix_cli.NOT_OK) == set(matrix.STATUSES) - {"passed", "outside-range"}


def test_cli_unlisted_release_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    from gpucatalog.cli import main
    assert main(["matrix", "gpu-queueing", "--kubernetes", "1.35,1.33"]) == 2
    err = capsys.readouterr().err
    assert "'1.33'" in err and "1.34 (v1.34.4), 1.35 (v1.35.4), 1.36 (v1.36.3), 1.37 (v1.37.2)" in err


@pytest.mark.toolchain  # renders the real bundle (pinned helm); the one cell is outside its range: nothing runs
def test_cli_outside_range_cell_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from gpucatalog.cli import main
    monkeypatch.setenv("CATALOG_KEY_DIR", str(tmp_path / "keys"))
    assert main(["matrix", "gpu-queueing@0.1.0", "--kubernetes", "1.37", "--out", str(tmp_path / "m"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (cell,) = doc["cells"]
    assert cell["status"] == "outside-range" and cell["bundle"] == "gpu-queueing@0.1.0"
    assert "kueue v0.17.0 supports Kubernetes >=1.29.0 <1.37.0" in cell["detail"] and cell["evidence"] == ""
    assert cell["digest"] == "" and (tmp_path / "m" / "matrix.md").is_file()
