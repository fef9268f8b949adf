"""The base images the sim kubelet runs with their own commands (data/base-images.yaml): the table,
image-name matching, Kubernetes' command/args rule over the image's CMD, kwok's selector agreeing
with the kubelet's, and a container started on the busybox root (needs root and Debian's
busybox-static). No cluster needed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from gpucatalog.clusters.sim import images, rootfs
from gpucatalog.core import executor

DATA = Path(images.__file__).parent / "data" / "base-images.yaml"
has_busybox = pytest.mark.skipif(not rootfs.available("busybox"), reason="Debian's busybox-static not installed")


def test_table_names_the_common_images_each_on_a_known_root() -> None:
    doc = yaml.safe_load(DATA.read_text())
    rows = {e["name"]: e for e in doc["images"]}
    assert set(rows) == {"busybox", "alpine", "debian", "ubuntu", "python", "e2e-test-images/agnhost"}
    assert all(e["rootfs"] in rootfs.KINDS and e["cmd"] for e in rows.values())
    assert all(images.base_name(n) == n for n in rows)  # written as matched: no host, tag, library/
    assert rows["python"]["rootfs"] == "host"
    assert (rows["e2e-test-images/agnhost"]["entrypoint"], rows["e2e-test-images/agnhost"]["cmd"]) == (
        ["/agnhost"], ["pause"])


@pytest.mark.parametrize(("ref", "name"), [
    ("busybox", "busybox"), ("busybox:1.36", "busybox"), ("library/busybox:1.36@sha256:ab", "busybox"),
    ("mirror.example:5000/library/alpine:3.20", "alpine"), ("localhost/ubuntu", "ubuntu"),
    ("example.org/e2e-test-images/agnhost:2.52", "e2e-test-images/agnhost"), ("someone/busybox", "someone/busybox"),
])
def test_base_name_drops_host_tag_digest_and_library(ref: str, name: str) -> None:
    assert images.base_name(ref) == name


@has_busybox
def test_command_and_args_follow_kubernetes_over_the_image_cmd() -> None:
    assert images.argv_for({"image": "busybox"}) == ["sh"]
    assert images.argv_for({"image": "alpine:3", "args": ["-c", "exit 3"]}) == ["-c", "exit 3"]  # args replace CMD
    assert images.argv_for({"image": "busybox", "command": ["sleep"], "args": ["infinity"]}) == ["sleep", "infinity"]
    assert images.argv_for({"image": "debian:12", "command": ["/no/such"]}) == ["/no/such"]  # found or not at start
    assert images.lookup("registry.example/pause:3.10") is None  # kwok's: all pause does is run until deleted


@has_busybox
@pytest.mark.skipif(not Path("/usr/bin/jq").exists(), reason="jq not installed")
def test_kwok_selector_and_kubelet_agree_on_which_pods_run_for_real() -> None:
    expr = images.kwok_exclusion_jq()
    run_for = {"sim.gpu-catalog.dev/run-for": "1h"}
    cases = [
        (["busybox:1.36"], None, True),
        (["library/python:3.12@sha256:1"], {"team": "a"}, True),
        (["busybox"], run_for, False),  # a scripted end stays kwok's
        (["alpine"], {"sim.gpu-catalog.dev/exit-code": "3"}, False),
        (["ghcr.io/gpu-catalog/podlister:1"], run_for, True),  # the project's programs always run
        (["nvcr.io/nvidia/cuda:12", "ubuntu:24.04"], None, True),
        (["nvcr.io/nvidia/cuda:12"], None, False),
        (["someone/busybox"], None, False),
        (["registry.example/pause:3.10"], None, False),
    ]
    for refs, ann, want in cases:
        pod = {"metadata": {"annotations": ann} if ann else {}, "spec": {"containers": [{"image": r} for r in refs]}}
        got = executor.run(["jq", expr], input=json.dumps(pod)).stdout.strip()
        assert (got, images.sim_runs(refs, ann)) == (json.dumps(want), want), (refs, ann)


@has_busybox
@pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")
def test_a_container_on_the_busybox_root(tmp_path: Path) -> None:
    base = rootfs.ensure("busybox", tmp_path / "cache")
    assert base is not None and rootfs.ensure("busybox", tmp_path / "cache") == base  # built once
    (tmp_path / "vol").mkdir()
    (tmp_path / "vol" / "f").write_text("from a volume\n")

    def start(argv: list[str], workdir: str = "/") -> tuple[int, str, str]:
        spec = {"net": None, "argv": argv, "env": {"PATH": "/usr/bin:/bin", "WHO": "pod"}, "workingDir": workdir,
                "mounts": [{"source": str(tmp_path / "vol"), "mountPath": "/data", "readOnly": True},
                           {"source": str(tmp_path / "vol"), "mountPath": "/var/run/secrets/sa", "readOnly": True}],
                "root": str(tmp_path / "root"), "rootfs": str(base)}
        (tmp_path / "c.json").write_text(json.dumps(spec))
        p = executor.run([sys.executable, "-m", "gpucatalog.clusters.sim.podexec", str(tmp_path / "c.json")],
                         check=False, env={"PYTHONPATH": str(Path(images.__file__).parents[3])})
        err = tmp_path / "c.start-error"
        return p.returncode, p.stdout, err.read_text() if err.exists() else ""

    assert start(["sh", "-c", "exit 3"]) == (3, "", "")
    code, out, _ = start(["sh", "-c", "echo $WHO; pwd; cat /data/f; echo w > /tmp/x && cat /tmp/x; bash -c 'echo b'; "
                          "cat /var/run/secrets/sa/f"], "/work/dir")
    assert (code, out.split("\n")) == (0, ["pod", "/work/dir", "from a volume", "w", "b", "from a volume", ""])
    assert start(["no-such-command"]) == (128, "", "exec: 'no-such-command': No such file or directory")
    assert not (base / "tmp" / "x").exists()  # the container wrote its own copy, never the cache


def test_a_root_built_after_the_process_started_is_run_by_the_next_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    # a test worker that looked the table up before agnhost was built must see it once it is:
    # the kwok selector written at the next cluster start depends on it
    built: set[str] = {"host"}
    monkeypatch.setattr(rootfs, "available", lambda kind: kind in built)
    images.refresh_base_images()
    try:
        assert set(images.base_images()) == {"python"}
        built |= {"busybox", "agnhost"}
        images.refresh_base_images()  # as a cluster start does
        assert set(images.base_images()) == {"busybox", "alpine", "debian", "ubuntu", "python",
                                             "e2e-test-images/agnhost"}
        assert "e2e-test-images/agnhost" in images.kwok_exclusion_jq()
    finally:
        monkeypatch.undo()
        images.refresh_base_images()


@pytest.mark.skipif(not rootfs.CURL.is_file(), reason="Debian's curl not installed")
def test_a_program_for_the_agnhost_root_comes_with_the_libraries_it_loads(tmp_path: Path) -> None:
    libs = rootfs.shared_libraries(rootfs.CURL)
    assert any(p.name.startswith("libc.so") for p in libs) and any(p.name.startswith("ld-linux") for p in libs)
    assert all(p.is_absolute() and p.exists() for p in libs)
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    rootfs._add_program(root, rootfs.CURL)
    assert (root / "bin" / "curl").is_file()
    for lib in libs:  # each where the loader asks for it, as a file of its own (not a link out of the root)
        copied = root / lib.relative_to("/")
        assert copied.is_file() and not copied.is_symlink(), copied
