"""Strict YAML and file reading (issue 14, attacks 8 and 9): duplicate keys, alias bombs,
self-referring aliases, non-UTF-8 text and files that are not regular files give a message
naming the file and line (exit 2), never a silent last-key-wins, a memory blow-up or a traceback."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpucatalog.catalog import loader, render
from gpucatalog.cli import main
from gpucatalog.core import errors, yamlfile

BUNDLE = "bundles/mini/0.1.0.yaml"


def laughs(levels: int = 9, indent: str = "") -> str:
    lines = [f'{indent}l0: &l0 "lol"']
    lines += [f"{indent}l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_duplicate_key_is_refused_with_both_lines(tmp_path: Path) -> None:
    with pytest.raises(errors.InputError) as exc:
        yamlfile.parse_data("a: 1\nb:\n  c: 1\n  c: 2\n", tmp_path / "x.yaml")
    assert exc.value.exit_code == 2
    assert str(exc.value) == (f"{tmp_path / 'x.yaml'}:4: c: duplicate key 'c' (first at line 3); "
                              "YAML would silently keep only the last one")


def test_merge_keys_may_be_overridden_but_explicit_keys_not_repeated(tmp_path: Path) -> None:
    assert yamlfile.parse_data("x: &x {a: 1}\ny:\n  <<: *x\n  a: 2\n", tmp_path / "m.yaml") == {
        "x": {"a": 1}, "y": {"a": 2}}
    # 1 and "1" are different keys in YAML: not a duplicate
    assert yamlfile.parse_data('1: a\n"1": b\n', tmp_path / "m.yaml") == {1: "a", "1": "b"}


def test_billion_laughs_fails_fast_with_a_message(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(errors.InputError, match="expands to more than 100000 nodes") as exc:
        yamlfile.parse_data(laughs(), tmp_path / "lol.yaml")
    assert time.monotonic() - t0 < 2 and exc.value.line is not None


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    with pytest.raises(errors.InputError, match="refers to the node that contains it"):
        yamlfile.parse_data("a: &a [1, *a]\n", tmp_path / "r.yaml")


def test_deep_nesting_is_a_message_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(errors.InputError):
        yamlfile.parse_data("[" * 20000 + "]" * 20000, tmp_path / "d.yaml")


@pytest.mark.parametrize(("name", "make", "message"), [
    ("dir", lambda p: p.mkdir(), "is a folder"),
    ("fifo", lambda p: __import__("os").mkfifo(p), "not a regular file"),
    ("huge", lambda p: p.write_bytes(b"#" * (yamlfile.MAX_BYTES + 1)), "more than the"),
    ("latin1", lambda p: p.write_bytes(b"name: caf\xe9\n"), "not UTF-8 text (byte 9 is 0xe9)"),
])
def test_unreadable_files_are_bad_input(tmp_path: Path, name: str, make: object, message: str) -> None:
    p = tmp_path / f"{name}.yaml"
    make(p)  # type: ignore[operator]
    with pytest.raises(errors.InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        yamlfile.read_text(p)


def test_dev_zero_is_refused_without_reading(tmp_path: Path) -> None:
    (tmp_path / "z.yaml").symlink_to("/dev/zero")
    with pytest.raises(errors.InputError, match="not a regular file"):
        yamlfile.read_text(tmp_path / "z.yaml")


def test_duplicate_kubernetes_version_in_a_bundle_is_exit_2(mini_catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = mini_catalog / BUNDLE
    f.write_text(f.read_text().replace("  kubernetesVersion: 1.36.3\n", "  kubernetesVersion: 1.36.3\n  kubernetesVersion: 1.30.0\n"))
    assert main(["--catalog-dir", str(mini_catalog), "show", "mini"]) == 2
    err = capsys.readouterr().err
    assert f"{f}:7: kubernetesVersion: duplicate key 'kubernetesVersion' (first at line 6)" in err


def test_billion_laughs_in_a_bundle_is_exit_2_fast(mini_catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = mini_catalog / BUNDLE
    f.write_text(f.read_text().replace("    kind: {}\n", "    kind: {kustomize: {alpha: {patches: [{laughs: {}}]}}}\n")
                 + "# the block below is a billion 'lol's once expanded\nx-laughs:\n" + laughs(indent="  "))
    t0 = time.monotonic()
    assert main(["--catalog-dir", str(mini_catalog), "render", "mini", "--profile", "kind", "--out",
                 str(mini_catalog.parent / "out")]) == 2
    assert "expands to more than 100000 nodes" in capsys.readouterr().err
    assert time.monotonic() - t0 < 10 and not (mini_catalog.parent / "out").exists()


@pytest.mark.parametrize("kind", ["{}", "[Bundle]", "7", "null"])
def test_a_kind_that_is_not_a_name_is_exit_2(mini_catalog: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the fuzzer (FUZZ_EXAMPLES=2000): a second document ``kind: {}`` in a bundle file
    raised TypeError (a mapping is not hashable) and ended in a traceback."""
    f = mini_catalog / BUNDLE
    f.write_text(f.read_text() + f"---\nkind: {kind}\n")
    assert main(["--catalog-dir", str(mini_catalog), "list"]) == 2
    err = capsys.readouterr().err
    assert f"{f}:" in err and "unknown kind" in err and "document 1" in err and "Traceback" not in err


def test_non_utf8_catalog_file_is_exit_2(mini_catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = mini_catalog / "components" / "alpha" / "2.0.0.yaml"
    bad.write_bytes(b"name: \xff\xfe\x00bad\n")
    assert main(["--catalog-dir", str(mini_catalog), "list"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: not UTF-8 text (byte 6 is 0xff)" in err and "Traceback" not in err


def test_chart_values_yaml_is_read_strictly(mini_catalog: Path) -> None:
    v = mini_catalog.parent / "charts" / "demo" / "values.yaml"
    v.write_text(v.read_text() + "replicas: 5\n")
    with pytest.raises(errors.InputError, match="duplicate key 'replicas'"):
        render.render_bundle(loader.load_catalog(mini_catalog), "mini", "sim")
