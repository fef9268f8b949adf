"""The ``catalog keys`` and ``catalog promote`` commands end to end (exit codes, output, files)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpucatalog import cli
from gpucatalog.catalog import loader
from gpucatalog.cli import promote as promote_cli

DIGEST_A = "sha256:" + "a1" * 32


@pytest.fixture(autouse=True)
def only_our_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    # The other sub-commands come from other branches; these tests exercise ours through the real main().
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("keys", "promote", "publish"))


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Stand-in for rendering the catalog (the lead's renderer): profile -> digest, settable per test."""
    digests = {"sim": DIGEST_A}
    monkeypatch.setattr(promote_cli, "fresh_render",
                        lambda _cat, _b, _v: ((lambda p: digests[p]), ("fractional_gpu",)))
    return digests


def test_keys_generate_prints_paths_never_key_material(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["keys", "generate", "--out", str(tmp_path), "--name", "ci"]) == 0
    out = capsys.readouterr()
    assert "ci.key" in out.out and "keyid" in out.out
    assert "BEGIN" not in out.out + out.err
    key_b64 = (tmp_path / "ci.key").read_text().splitlines()[1]
    assert key_b64 not in out.out + out.err
    assert cli.main(["keys", "generate", "--out", str(tmp_path), "--name", "ci"]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err


def test_keys_trust_and_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["keys", "generate", "--out", str(tmp_path), "--name", "ci"])
    keyid = capsys.readouterr().out.split("keyid:")[1].strip()
    tf = tmp_path / "trust.yaml"
    assert cli.main(["keys", "trust", str(tmp_path / "ci.pub"), "--channel", "candidate", "--trust-file", str(tf)]) == 0
    assert keyid in tf.read_text()
    capsys.readouterr()
    assert cli.main(["keys", "id", str(tmp_path / "ci.pub")]) == 0
    assert capsys.readouterr().out.strip() == keyid


def _promote(catalog_dir: Path, *args: str) -> int:
    return cli.main(["--catalog-dir", str(catalog_dir), "promote", *args])


def test_promote_candidate_then_stable_then_tampered(
    catalog_dir: Path, make_evidence: Callable[..., Path], fresh: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    ev = make_evidence()
    assert _promote(catalog_dir, "gpu-scheduling@0.1.0", "--to", "candidate", "--evidence", str(ev)) == 0
    assert "promoted gpu-scheduling@0.1.0 to candidate" in capsys.readouterr().out
    assert _promote(catalog_dir, "gpu-scheduling@0.1.0", "--to", "stable", "--evidence", str(ev / "evidence.dsse.json")) == 0
    # Tampered: the bundle was edited after certification.
    fresh["sim"] = "sha256:" + "b2" * 32
    ev2 = make_evidence(version="0.2.0")
    before = (catalog_dir / "channels" / "candidate.yaml").read_bytes()
    assert _promote(catalog_dir, "gpu-scheduling@0.2.0", "--to", "candidate", "--evidence", str(ev2)) == 1
    err = capsys.readouterr().err
    assert "changed after certification" in err and "unmet requirement" in err
    assert (catalog_dir / "channels" / "candidate.yaml").read_bytes() == before


def test_promote_exit_2_for_unknown_channel_truncated_file_and_bad_ref(
    catalog_dir: Path, make_evidence: Callable[..., Path], fresh: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    ev = make_evidence()
    assert _promote(catalog_dir, "gpu-scheduling@0.1.0", "--to", "nightly", "--evidence", str(ev)) == 2
    assert "unknown channel 'nightly'" in capsys.readouterr().err
    assert _promote(catalog_dir, "@0.1.0", "--to", "candidate", "--evidence", str(ev)) == 2
    assert _promote(catalog_dir, "gpu-scheduling@0.1.0", "--to", "candidate", "--evidence", str(ev)) == 0
    ch = catalog_dir / "channels" / "candidate.yaml"
    ch.write_bytes(ch.read_bytes()[:-40])
    assert _promote(catalog_dir, "gpu-scheduling@0.1.0", "--to", "stable", "--evidence", str(ev)) == 2
    assert "candidate.yaml" in capsys.readouterr().err


def test_promote_missing_evidence_file_is_exit_2(catalog_dir: Path, fresh: dict[str, str], tmp_path: Path) -> None:
    assert _promote(catalog_dir, "gpu-scheduling@0.1.0", "--to", "candidate", "--evidence", str(tmp_path / "nope")) == 2


@pytest.mark.registry
def test_mirror_cli_and_digest_mismatch(start_registry: Callable[[str], Any], tmp_path: Path, catalog_dir: Path,
                                        make_evidence: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    from gpucatalog.pipelines import oci, promote, publish
    from gpucatalog.toolchain import build

    src, dst = start_registry("src"), start_registry("dst")
    chart = tmp_path / "c"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: team-queues\nversion: 0.1.0\n")
    ref = oci.parse_ref(f"{src.oci}/catalog")
    pc = publish.push_chart(build.ensure("helm"), chart, ref, oci.Client(ref), tmp_path / "w")

    class R:
        bundle, version, profile, digest, lock, components = "b", "1.0.0", "sim", DIGEST_A, {"digest": DIGEST_A}, []

    publish.push_lock(R(), ref, oci.Client(ref), [pc])
    mirror = ["--catalog-dir", str(catalog_dir), "mirror", "b@1.0.0", "--from", f"{src.oci}/catalog"]
    # only what a channel certified travels: not in stable (exit 1, nothing pushed) ...
    assert cli.main([*mirror, "--to", f"{dst.oci}/air"]) == 1
    assert "not in channel 'stable'" in capsys.readouterr().err and dst.catalog() == []
    # ... but in candidate, with this digest, and evidence that the judge accepts
    promote.promote("b", "1.0.0", "candidate", [make_evidence(bundle="b", version="1.0.0")], lambda _p: DIGEST_A,
                    catalog_dir=catalog_dir, promoted_by="t@h")
    mirror += ["--channel", "candidate"]
    assert cli.main([*mirror, "--to", f"{dst.oci}/air"]) == 0
    assert f"127.0.0.1:{dst.port}/air/team-queues:0.1.0@{pc.manifestDigest}" in capsys.readouterr().out
    blob = src.blob_file(pc.chartDigest)
    data = bytearray(blob.read_bytes())
    data[10] ^= 0xFF
    blob.write_bytes(bytes(data))
    assert cli.main([*mirror, "--to", f"{dst.oci}/air2"]) == 1
    assert "digest mismatch" in capsys.readouterr().err
    assert not [r for r in dst.catalog() if r.startswith("air2")]
    assert os.path.exists(blob)


def test_promote_takes_the_version_from_the_evidence(
    catalog_dir: Path, make_evidence: Callable[..., Path], fresh: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _promote(catalog_dir, "gpu-scheduling", "--to", "candidate", "--evidence", str(make_evidence(version="0.3.0"))) == 0
    assert "promoted gpu-scheduling@0.3.0" in capsys.readouterr().out
    two = [str(make_evidence(version="0.4.0")), str(make_evidence(version="0.5.0"))]
    assert _promote(catalog_dir, "gpu-scheduling", "--to", "candidate", "--evidence", *two) == 2
    assert "give the version explicitly" in capsys.readouterr().err


def test_shipped_policy_and_trust_file_are_valid() -> None:
    from gpucatalog.pipelines import policy, trust

    pol = policy.load(loader.default_root() / "channels" / "policy.yaml")
    assert pol.channel("stable").source_channel == "candidate"
    trust.load(loader.default_root() / "trust.yaml")


def test_keys_import_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import stat

    cli.main(["keys", "generate", "--out", str(tmp_path / "a"), "--name", "ci"])
    pem = (tmp_path / "a" / "ci.key").read_text()
    monkeypatch.setenv("CATALOG_SIGNING_KEY", pem)
    assert cli.main(["keys", "import", "--from-env", "CATALOG_SIGNING_KEY", "--out", str(tmp_path / "b"), "--name", "ci"]) == 0
    out = capsys.readouterr()
    assert pem.splitlines()[1] not in out.out + out.err
    assert (tmp_path / "b" / "ci.key").read_text() == pem
    assert stat.S_IMODE((tmp_path / "b" / "ci.key").stat().st_mode) == 0o600
    assert (tmp_path / "b" / "ci.pub").read_text() == (tmp_path / "a" / "ci.pub").read_text()
    monkeypatch.setenv("CATALOG_SIGNING_KEY", "garbage")
    assert cli.main(["keys", "import", "--from-env", "CATALOG_SIGNING_KEY", "--out", str(tmp_path / "c")]) == 2
    assert "garbage" not in capsys.readouterr().err
