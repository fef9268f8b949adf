from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpucatalog.core import errors
from gpucatalog.pipelines import keys, trust


def test_generate_writes_0600_private_and_public_key(tmp_path: Path) -> None:
    k = keys.generate(tmp_path / "k", "ci")
    assert stat.S_IMODE(k.private_path.stat().st_mode) == 0o600
    assert keys.keyid(keys.load_private(k.private_path).public_key()) == k.keyid
    assert keys.keyid(keys.load_public(k.public_path)) == k.keyid
    assert "PRIVATE" not in k.public_path.read_text()


def test_generate_refuses_to_overwrite(tmp_path: Path) -> None:
    k = keys.generate(tmp_path, "ci")
    before = k.private_path.read_bytes()
    with pytest.raises(errors.ConflictError, match="refusing to overwrite"):
        keys.generate(tmp_path, "ci")
    assert k.private_path.read_bytes() == before


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o666])
def test_load_refuses_private_key_readable_by_others(tmp_path: Path, mode: int) -> None:
    k = keys.generate(tmp_path, "ci")
    os.chmod(k.private_path, mode)
    with pytest.raises(errors.InputError, match="too open") as exc:
        keys.load_private(k.private_path)
    assert exc.value.exit_code == 2
    assert "BEGIN" not in str(exc.value)


def test_load_garbage_key_does_not_echo_content(tmp_path: Path) -> None:
    p = tmp_path / "bad.key"
    p.write_text("SECRET-MATERIAL-XYZ")
    os.chmod(p, 0o600)
    with pytest.raises(errors.InputError) as exc:
        keys.load_private(p)
    assert "SECRET-MATERIAL-XYZ" not in str(exc.value)


def test_trust_file_round_trip_and_channel_scope(tmp_path: Path) -> None:
    a = keys.generate(tmp_path, "a")
    b = keys.generate(tmp_path, "b")
    tf = tmp_path / "trust.yaml"
    trust.add_key(tf, "a", keys.load_public(a.public_path), ["candidate"])
    trust.add_key(tf, "b", keys.load_public(b.public_path), ["candidate", "stable"])
    t = trust.load(tf)
    assert set(t.for_channel("candidate")) == {a.keyid, b.keyid}
    assert set(t.for_channel("stable")) == {b.keyid}
    assert t.for_channel("nightly") == {}


def test_trust_file_with_wrong_keyid_is_rejected(tmp_path: Path) -> None:
    a = keys.generate(tmp_path, "a")
    tf = tmp_path / "trust.yaml"
    trust.add_key(tf, "a", keys.load_public(a.public_path), ["candidate"])
    tf.write_text(tf.read_text().replace(a.keyid, "f" * 64))
    with pytest.raises(errors.SchemaError, match="keyid does not match"):
        trust.load(tf)


def test_trust_file_schema_errors_name_the_field(tmp_path: Path) -> None:
    tf = tmp_path / "trust.yaml"
    tf.write_text("apiVersion: gpu-catalog.dev/v1alpha1\nkind: TrustFile\nkeys:\n- name: x\n  channels: [a]\n")
    with pytest.raises(errors.SchemaError, match="publicKey") as exc:
        trust.load(tf)
    assert exc.value.field == "keys[0]" and exc.value.line == 4
