"""install verifies before it installs (issue 14, attacks 3 and 9): what differs from what the
channel certified exits 1 naming the difference, a bad cluster exits 2, and nothing is applied.
``--allow-uncertified`` is the one way round and says so. The channel is the real mini catalog's,
promoted by the real gate; these use --dry-run or fail before any helm call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucatalog.cli import main
from gpucatalog.pipelines import channels, keys, trust

pytestmark = pytest.mark.toolchain  # renders with the pinned helm

KC_UNREACHABLE = ("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                  "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
                  "current-context: c\n")


def _install(cat: Path, *args: str) -> int:
    return main(["--catalog-dir", str(cat), "install", *args])


def test_certified_install_plan_says_so(certified_mini: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _install(certified_mini, "mini", "--channel", "stable", "--profile", "sim", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "plan for mini@0.1.0" in out and "certified in channel stable for profile sim" in out


def test_template_added_after_promotion_is_refused(certified_mini: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tpl = certified_mini.parent / "charts" / "demo" / "templates" / "extra.yaml"
    tpl.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: added-after-promotion}\ndata: {x: y}\n")
    assert _install(certified_mini, "mini", "--channel", "stable", "--profile", "sim", "--dry-run") == 1
    cap = capsys.readouterr()
    assert "is not what channel 'stable' certified; nothing installed" in cap.err
    assert "changed after promotion" in cap.err and "plan for" not in cap.out


def test_profile_never_certified_is_refused(certified_mini: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _install(certified_mini, "mini", "--channel", "stable", "--profile", "kind", "--dry-run") == 1
    assert "was never certified for profile 'kind'" in capsys.readouterr().err


def test_tampered_stored_evidence_is_refused(certified_mini: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entry = channels.load(certified_mini / "channels", "stable").entries[0]
    stored = channels.stored_evidence(certified_mini / "channels", entry["evidenceDigest"])
    env = json.loads(stored.read_text())
    stored.write_text(json.dumps(env, indent=1))  # same content, other bytes: digest differs
    assert _install(certified_mini, "mini", "--channel", "stable", "--profile", "sim", "--dry-run") == 1
    assert "does not match the entry's digest" in capsys.readouterr().err
    stored.unlink()
    assert _install(certified_mini, "mini", "--channel", "stable", "--profile", "sim", "--dry-run") == 1
    assert "evidence cannot be read" in capsys.readouterr().err


def test_signer_no_longer_trusted_is_refused(certified_mini: Path, rogue_key: keys.GeneratedKey,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (certified_mini / "trust.yaml").unlink()
    trust.add_key(certified_mini / "trust.yaml", "rogue", keys.load_public(rogue_key.public_path), ["stable"])
    assert _install(certified_mini, "mini", "--channel", "stable", "--profile", "sim", "--dry-run") == 1
    assert "untrusted key" in capsys.readouterr().err


def test_allow_uncertified_is_the_one_way_round_and_says_so(certified_mini: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["mini@0.1.0", "--channel", "stable", "--profile", "kind", "--dry-run", "--allow-uncertified"]
    assert _install(certified_mini, *args) == 0
    cap = capsys.readouterr()
    assert "warning: installing UNCERTIFIED mini@0.1.0 (kind)" in cap.err
    assert "gpu-catalog: UNCERTIFIED mini@0.1.0 profile kind" in cap.out and "never certified" in cap.out


@pytest.mark.parametrize(("name", "text", "message"), [
    ("unreachable", KC_UNREACHABLE, "API server https://127.0.0.1:1 is unreachable"),
    ("garbage", "\x00\x01 this: [is not: a kubeconfig\n", "not a usable kubeconfig"),
    ("empty", "", "kubeconfig is empty; refusing to fall back to localhost:8080"),
    ("no-server", "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n", "not a usable kubeconfig"),
])
def test_bad_kubeconfig_is_exit_2_before_anything(certified_mini: Path, tmp_path: Path, name: str, text: str,
                                                  message: str, capsys: pytest.CaptureFixture[str]) -> None:
    kc = tmp_path / f"kubeconfig-{name}"
    kc.write_text(text)
    assert _install(certified_mini, "mini", "--channel", "stable", "--profile", "sim", "--kubeconfig", str(kc)) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "rendering" not in err


def test_no_kubeconfig_at_all_is_exit_2(certified_mini: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert _install(certified_mini, "mini", "--channel", "stable", "--profile", "sim") == 2
    assert "kubeconfig not found" in capsys.readouterr().err


def test_channel_path_that_is_a_folder_is_exit_2(mini_catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (mini_catalog / "channels" / "stable.yaml").mkdir(parents=True)
    (mini_catalog / "channels" / "policy.yaml").write_text(
        "apiVersion: gpu-catalog.dev/v1alpha1\nkind: PromotionPolicy\nchannels:\n  stable: {requiredProfiles: [sim]}\n")
    assert _install(mini_catalog, "mini", "--channel", "stable", "--profile", "sim", "--dry-run") == 2
    err = capsys.readouterr().err
    assert "stable.yaml: channel file is a folder" in err and "Traceback" not in err
