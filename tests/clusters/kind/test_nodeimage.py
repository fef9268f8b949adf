"""The pieces of the kind node image built here: image archives, the apt mirror it reads, the
cache key, the pod network config, the kind config for a local image and the engine's settings."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest
import yaml

from gpucatalog.clusters import shapes
from gpucatalog.clusters.kind import config, engine, imagearchive, nodeimage, podnetwork
from gpucatalog.core import errors

H100 = shapes.get("h100-80gb-x8")


# -- image archives -------------------------------------------------------------------------------
def _layer(tmp_path: Path, name: str, body: bytes) -> Path:
    src = tmp_path / f"{name}.bin"
    src.write_bytes(body)
    src.chmod(0o755)
    return imagearchive.write_layer(tmp_path / f"{name}.tar", {f"usr/local/bin/{name}": src, "etc/motd": b"hi\n"},
                                    links={"bin/sh": "/usr/local/bin/" + name}, dirs=("tmp",))


def test_a_layer_is_the_same_bytes_every_time_with_parents_modes_and_links(tmp_path: Path) -> None:
    a = _layer(tmp_path, "tool", b"\x7fELF")
    first = a.read_bytes()
    b = _layer(tmp_path, "tool", b"\x7fELF")
    assert b.read_bytes() == first
    with tarfile.open(a) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert list(members) == sorted(members)
    assert members["usr"].isdir() and members["usr/local/bin"].isdir()
    assert members["usr/local/bin/tool"].mode == 0o755 and members["etc/motd"].mode == 0o644
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "/usr/local/bin/tool"
    assert members["tmp"].mode == 0o1777
    assert {m.mtime for m in members.values()} == {0} and {m.uid for m in members.values()} == {0}


def test_an_archive_holds_each_layer_once_and_ids_are_config_digests(tmp_path: Path) -> None:
    base = _layer(tmp_path, "base", b"base")
    top1, top2 = _layer(tmp_path, "one", b"1"), _layer(tmp_path, "two", b"2")
    images = [imagearchive.Image("local.test/one:v1", (base, top1), entrypoint=("/usr/local/bin/one",)),
              imagearchive.Image("local.test/two:v2", (base, top2), cmd=("run",))]
    ids = imagearchive.write_archive(images, tmp_path / "a.tar")
    with tarfile.open(tmp_path / "a.tar") as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        configs = {m["RepoTags"][0]: json.load(tar.extractfile(m["Config"])) for m in manifest}  # type: ignore[arg-type]
        raw = {m["RepoTags"][0]: tar.extractfile(m["Config"]).read() for m in manifest}  # type: ignore[union-attr]
    base_sha = hashlib.sha256(base.read_bytes()).hexdigest()
    assert names.count(f"{base_sha}/layer.tar") == 1
    assert configs["local.test/one:v1"]["rootfs"]["diff_ids"][0] == f"sha256:{base_sha}"
    assert configs["local.test/one:v1"]["config"]["Entrypoint"] == ["/usr/local/bin/one"]
    assert configs["local.test/two:v2"]["config"]["Cmd"] == ["run"]
    for ref, body in raw.items():
        assert ids[ref] == "sha256:" + hashlib.sha256(body).hexdigest()
    assert imagearchive.write_archive(images, tmp_path / "b.tar") == ids
    assert (tmp_path / "b.tar").read_bytes() == (tmp_path / "a.tar").read_bytes()


def test_an_untagged_reference_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    layer = _layer(tmp_path, "x", b"x")
    with pytest.raises(errors.InputError, match="no tag"):
        imagearchive.write_archive([imagearchive.Image("local.test/x", (layer,))], tmp_path / "bad.tar")
    assert not (tmp_path / "bad.tar").exists()


# -- the apt mirror ---------------------------------------------------------------------------------
def test_the_mirror_comes_from_apts_deb822_sources_not_the_security_one(tmp_path: Path) -> None:
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.invalid/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb\n# a comment: here\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n")
    assert nodeimage.apt_mirror(tmp_path) == "http://mirror.invalid/debian"


def test_the_mirror_comes_from_a_one_line_sources_list(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text("# x\ndeb [arch=amd64] http://mirror.invalid/d bookworm main\n")
    assert nodeimage.apt_mirror(tmp_path) == "http://mirror.invalid/d"


def test_no_mirror_for_the_suite_is_bad_input_naming_where_it_looked(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text("deb http://mirror.invalid/d trixie main\n")
    with pytest.raises(errors.InputError, match="bookworm") as exc:
        nodeimage.apt_mirror(tmp_path)
    assert exc.value.field == str(tmp_path)


def test_the_image_tag_changes_with_any_input() -> None:
    inputs = {"recipe": "1", "kind": "v0.33.0", "tools": {"kubelet": {"version": "v1.36.3", "sha256": "a"}}}
    ref = nodeimage.ref_for(inputs)
    assert ref.startswith(f"{nodeimage.REGISTRY}/kind-node:v1.36.3-")
    changed = {**inputs, "tools": {"kubelet": {"version": "v1.36.3", "sha256": "b"}}}
    assert nodeimage.ref_for(changed) != ref
    assert nodeimage.ref_for({**inputs, "recipe": "2"}) != ref


# -- kind config and pod network for a local image ---------------------------------------------------
def test_a_local_image_turns_off_kindnetd_and_points_kubeadm_at_its_images() -> None:
    local = config.LocalImages("gpu-catalog.local", "3.6.16", "v1.14.2")
    doc = yaml.safe_load(config.render(2, H100, "gpu-catalog.local/kind-node:v1.36.3-x", local=local, cgroup_v1=True))
    assert doc["networking"] == {"disableDefaultCNI": True}
    patches = [yaml.safe_load(p) for p in doc["kubeadmConfigPatches"]]
    assert patches[0] == {"kind": "ClusterConfiguration", "imageRepository": "gpu-catalog.local",
                          "etcd": {"local": {"imageTag": "3.6.16"}}, "dns": {"imageTag": "v1.14.2"}}
    assert patches[1] == {"kind": "KubeletConfiguration", "syncFrequency": "10s", "failCgroupV1": False}
    upstream = yaml.safe_load(config.render(2, H100))
    assert "networking" not in upstream
    assert [yaml.safe_load(p) for p in upstream["kubeadmConfigPatches"]] == [
        {"kind": "KubeletConfiguration", "syncFrequency": "10s"}]


def test_each_node_gets_a_ptp_config_on_its_cidr_and_routes_to_every_other_node() -> None:
    nodes = [podnetwork.NodeNet("c-control-plane", "10.244.0.0/24", "172.18.0.2"),
             podnetwork.NodeNet("c-worker", "10.244.1.0/24", "172.18.0.3"),
             podnetwork.NodeNet("c-worker2", "10.244.2.0/24", "172.18.0.4")]
    table = podnetwork.routes(nodes)
    assert table["c-worker"] == [("10.244.0.0/24", "172.18.0.2"), ("10.244.2.0/24", "172.18.0.4")]
    assert all(len(r) == 2 for r in table.values())
    doc = json.loads(podnetwork.conflist("10.244.1.0/24"))
    assert [p["type"] for p in doc["plugins"]] == ["ptp", "portmap"]
    assert doc["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.244.1.0/24"}]]


# -- the engine --------------------------------------------------------------------------------------
def test_the_engine_listens_on_a_unix_socket_only_and_leaves_iptables_alone(tmp_path: Path) -> None:
    cfg = engine.daemon_config(tmp_path / "data", None)
    assert cfg["hosts"] == [f"unix://{engine.SOCKET}"]
    assert (cfg["iptables"], cfg["ip-forward"], cfg["ip-masq"]) == (False, False, False)
    assert "default-runtime" not in cfg and "runtimes" not in cfg
    wrapped = engine.daemon_config(tmp_path / "data", tmp_path / "runc-capfilter")
    assert wrapped["default-runtime"] == "capfilter"
    assert wrapped["runtimes"] == {"capfilter": {"path": str(tmp_path / "runc-capfilter")}}


def test_docker_host_set_by_the_user_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///elsewhere.sock")
    assert engine.env() == {}
