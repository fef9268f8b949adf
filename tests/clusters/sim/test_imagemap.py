"""The image-map overlay (bring-your-own binaries): validated like any input (schema, executable
exists and is executable; exit 2 naming file and field, nothing started), merged over the shipped
map, and each executable's sha256 and reported version recorded. The mapped executables are the
project's own demo programs behind a small launcher script."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from gpucatalog.cli import main
from gpucatalog.clusters.sim import binversion, imagemap, images
from gpucatalog.clusters.sim.layout import Layout
from gpucatalog.core import errors, executor
from gpucatalog.toolchain import build


def launcher(d: Path, module: str = "gpucatalog.clusters.sim.podlister", name: str = "podlister") -> Path:
    """An executable on this host that runs one of the project's demo programs."""
    exe = d / name
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m {module} \"$@\"\n")
    exe.chmod(0o755)
    return exe


def overlay(d: Path, body: str) -> Path:
    f = d / "images.yaml"
    f.write_text("apiVersion: gpu-catalog.dev/v1alpha1\nkind: SimImageMapOverlay\nimages:\n" + body)
    return f


def test_overlay_records_sha256_and_reported_version(tmp_path: Path) -> None:
    exe = launcher(tmp_path)
    f = overlay(tmp_path, "  - image: ghcr.io/example/podlister\n    executable: podlister\n"
                          "    entrypoint: /workspace/app\n    versionArgs: [--version]\n")
    (b,) = imagemap.load(f)
    assert b.executable == str(exe.resolve())  # relative to the overlay file
    assert b.sha256 == "sha256:" + hashlib.sha256(exe.read_bytes()).hexdigest()
    assert b.version == "0.1.0"  # podlister --version prints gpu-catalog's version
    assert imagemap.read(imagemap.save([b], tmp_path / "saved.json")) == [b]


def test_overlay_is_merged_over_the_shipped_map_with_the_image_entrypoint(tmp_path: Path) -> None:
    exe = launcher(tmp_path)
    f = overlay(tmp_path, f"  - image: ghcr.io/gpu-catalog/podlister\n    executable: {exe}\n"
                          "    entrypoint: /workspace/app\n")
    table = images.merged(imagemap.load(f))
    assert set(images.shipped()) <= set(table)
    entry = images.lookup("ghcr.io/gpu-catalog/podlister:v9@sha256:" + "0" * 64, table)
    assert entry is not None and entry.executable == str(exe.resolve())  # the overlay replaced the shipped entry
    # KAI's components set only args: the executable stands in for /workspace/app.
    assert images.argv_for({"image": "ghcr.io/gpu-catalog/podlister:v1", "args": ["--once"]}, table) == [
        str(exe.resolve()), "--once"]
    assert images.argv_for({"image": "ghcr.io/gpu-catalog/podlister:v1", "command": ["/workspace/app", "-v"],
                            "args": ["--once"]}, table) == [str(exe.resolve()), "-v", "--once"]
    with pytest.raises(errors.NotFoundError, match="executable '/bin/sh' not found in image"):
        images.argv_for({"image": "ghcr.io/gpu-catalog/podlister:v1", "command": ["/bin/sh"]}, table)
    assert "ghcr.io/gpu-catalog/podlister" in images.kwok_exclusion_jq(table)


def test_a_tag_of_its_own_runs_its_own_binary(tmp_path: Path) -> None:
    """Two releases of one program on one cluster (an upgrade from KAI v0.16.8 to v0.17.0): an
    entry with a tag serves that tag, before the repository's entry, which serves every other."""
    old, new = launcher(tmp_path, name="old"), launcher(tmp_path, name="new")
    f = overlay(tmp_path, f"  - image: ghcr.io/x/sched\n    executable: {old}\n    entrypoint: /workspace/app\n"
                          f"  - image: ghcr.io/x/sched:v0.17.0\n    executable: {new}\n    entrypoint: /workspace/app\n"
                          f"  - image: reg:5000/y/only:v2\n    executable: {new}\n    entrypoint: /workspace/app\n")
    table = images.merged(imagemap.load(f))

    def exe(ref: str) -> str | None:
        e = images.lookup(ref, table)
        return None if e is None else Path(e.executable).name

    assert exe("ghcr.io/x/sched:v0.17.0") == exe("ghcr.io/x/sched:v0.17.0@sha256:" + "0" * 64) == "new"
    assert exe("ghcr.io/x/sched:v0.16.8") == exe("ghcr.io/x/sched") == "old"
    assert exe("reg:5000/y/only:v2") == "new" and exe("reg:5000/y/only:v1") is None and exe("reg:5000/y/only") is None
    # kwok leaves exactly the pods the sim kubelet runs
    expr = images.kwok_exclusion_jq(table)

    def kwok_skips(ref: str) -> bool:
        pod = {"spec": {"containers": [{"image": "nvcr.io/nvidia/cuda:12"}, {"image": ref}]}}
        return executor.run(["jq", expr], input=json.dumps(pod)).stdout.strip() == "true"

    for ref in ("ghcr.io/x/sched:v0.17.0", "ghcr.io/x/sched:v9", "reg:5000/y/only:v2", "reg:5000/y/only:v2@sha256:1"):
        assert kwok_skips(ref) and exe(ref) is not None, ref
    for ref in ("reg:5000/y/only:v1", "reg:5000/y/only", "ghcr.io/x/sched-other:v0.17.0"):
        assert not kwok_skips(ref) and exe(ref) is None, ref


@pytest.mark.parametrize(("body", "error", "needle", "field"), [
    ("  - image: ghcr.io/x/y\n    executable: {exe}\n    entrypoint: /workspace/app\n    executabel: {exe}\n",
     errors.SchemaError, "unknown field 'executabel'", "images[0].executabel"),
    ("  - image: ghcr.io/x/y\n    executable: /nonexistent/scheduler\n    entrypoint: /workspace/app\n",
     errors.NotFoundError, "executable for ghcr.io/x/y not found: /nonexistent/scheduler", "images[0].executable"),
    ("  - image: ghcr.io/x/y\n    executable: {plain}\n    entrypoint: /workspace/app\n",
     errors.InputError, "is not executable", "images[0].executable"),
    ("  - image: ghcr.io/x/y\n    executable: {exe}\n    entrypoint: /workspace/app\n"
     "  - image: ghcr.io/x/y\n    executable: {exe}\n    entrypoint: /workspace/app\n",
     errors.InputError, "image ghcr.io/x/y is mapped twice", "images[1].image"),
    ("  - image: ghcr.io/x/y@sha256:" + "0" * 64 + "\n    executable: {exe}\n    entrypoint: /workspace/app\n",
     errors.SchemaError, "does not match", "images[0].image"),
    ("  - image: ghcr.io/x/y:v1\n    executable: {exe}\n    entrypoint: /workspace/app\n"
     "  - image: ghcr.io/x/y:v1\n    executable: {exe}\n    entrypoint: /workspace/app\n",
     errors.InputError, "image ghcr.io/x/y:v1 is mapped twice", "images[1].image"),
])
def test_bad_overlay_is_bad_input_naming_file_and_field(tmp_path: Path, body: str, error: type, needle: str,
                                                        field: str) -> None:
    exe = launcher(tmp_path)
    plain = tmp_path / "plain"
    plain.write_text("not a program")
    f = overlay(tmp_path, body.format(exe=exe, plain=plain))
    with pytest.raises(errors.InputError) as info:
        imagemap.load(f)
    assert type(info.value) is error and needle in str(info.value)
    assert info.value.path == str(f) and info.value.field == field and info.value.line
    assert info.value.exit_code == 2


def test_cluster_up_and_certify_refuse_a_bad_overlay_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    f = overlay(tmp_path, "  - image: ghcr.io/x/y\n    executable: /nonexistent/scheduler\n    entrypoint: /a\n")
    name = f"byo-bad-{os.getpid()}"
    assert main(["cluster", "up", "--name", name, "--nodes", "1", "--image-map", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"{f}:5" in err and "images[0].executable" in err and "/nonexistent/scheduler" in err
    assert not Layout.of(name).root.exists()  # nothing started, no state written
    monkeypatch.setenv(imagemap.ENV, str(f))
    assert main(["cluster", "up", "--name", name, "--nodes", "1"]) == 2
    assert "/nonexistent/scheduler" in capsys.readouterr().err
    assert not Layout.of(name).root.exists()


@pytest.mark.toolchain
def test_certify_refuses_a_bad_overlay_and_a_provider_without_image_maps(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = overlay(tmp_path, "  - image: ghcr.io/kai-scheduler/kai-scheduler/scheduler\n    executable: /nonexistent/scheduler\n    entrypoint: /a\n")
    name = f"byo-cert-{os.getpid()}"
    assert main(["certify", "gpu-scheduling", "--cluster", "sim", "--cluster-name", name, "--image-map", str(f)]) == 2
    assert "/nonexistent/scheduler" in capsys.readouterr().err
    assert not Layout.of(name).root.exists()
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    good = overlay(tmp_path, f"  - image: ghcr.io/kai-scheduler/kai-scheduler/scheduler\n    executable: {launcher(tmp_path)}\n    entrypoint: /a\n")
    rc = main(["certify", "gpu-scheduling", "--cluster", f"kubeconfig={kc}", "--profile", "sim",
               "--suite", "fractional_gpu", "--image-map", str(good)])
    assert rc == 2
    assert "--image-map needs an image-map overlay" in capsys.readouterr().err


@pytest.mark.toolchain
def test_go_binaries_report_their_version_from_build_info() -> None:
    """A Go binary needs no --version flag: its embedded build information says (KAI's binaries,
    built from a v0.16.8 checkout, report v0.16.8 this way)."""
    kubectl = build.ensure("kubectl")
    info = binversion.go_build_info(kubectl)
    assert info["go"].startswith("go1.") and info["path"].endswith("cmd/kubectl")
    assert binversion.reported_version(kubectl) == build.versions()["kubectl"]
    assert binversion.reported_version(Path(sys.executable)) == "unknown"


@pytest.mark.parametrize(("ldflags", "want"), [
    # go quotes a value with spaces; the old reader kept the closing quote ('v0.16.8"')
    ('"-X github.com/k/s/pkg/scheduler/version.gitVersion=v0.16.8"', "v0.16.8"),
    ("\"-s -w -X 'k/version.gitCommit=abc' -X 'k/version.gitVersion=v0.17.0'\"", "v0.17.0"),
    ("-X=k/version.gitVersion=v1.2.3", "v1.2.3"),
])
def test_link_flags_are_read_as_go_quotes_them(ldflags: str, want: str) -> None:
    flags = binversion._x_flags(ldflags)
    assert binversion._from_go(flags) == want
