"""The DRA stand-in for kind: its wire format, and its three gRPC services served for real (unix
sockets and a loopback port) and called with grpcio as the kubelet calls them: registration,
health before and after the kubelet's confirmation, and claims prepared into CDI specs, refused
when they cannot be, and unprepared. Against a real kubelet: tests/clusters/kind/test_kind_live.py."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest

from gpucatalog.clusters.kind import draplugin
from gpucatalog.clusters.kind import protowire as pw

UID = "0b6e2c1a-7c1e-4c55-9d4e-1f2a3b4c5d6e"


def test_wire_round_trip_of_every_field_kind_used() -> None:
    nested = pw.encode([(1, "a"), (2, "b")])
    msg = pw.encode([(1, "text"), (2, True), (3, 300), (4, nested), (4, nested), (5, False), (6, ""), (7, -1)])
    fields = pw.decode(msg)
    assert pw.string(fields, 1) == "text" and pw.integer(fields, 2) == 1 and pw.integer(fields, 3) == 300
    assert [pw.string(m, 2) for m in pw.messages(fields, 4)] == ["b", "b"]
    assert 5 not in fields and 6 not in fields  # proto3 leaves defaults out
    assert pw.integer(fields, 7) == (1 << 64) - 1  # a negative int is ten bytes of two's complement
    entries = pw.decode_map(pw.decode(pw.encode(pw.encode_map(1, {"k2": b"v2", "k1": b""}))), 1)
    assert entries == {"k1": b"", "k2": b"v2"}
    # the same bytes protoc's encoder gives: field 1 "hi" is 0a 02 68 69, field 2 true is 10 01
    assert pw.encode([(1, "hi"), (2, True)]) == bytes.fromhex("0a02686910 01".replace(" ", ""))


@pytest.mark.parametrize("bad", [b"\x0a\x05ab", b"\x80", b"\x0d\x00\x00\x00\x00"])
def test_malformed_messages_are_refused(bad: bytes) -> None:
    with pytest.raises(pw.DecodeError):
        pw.decode(bad)


def _claim(pool: str = "worker-1", allocated: bool = True, uid: str = UID) -> dict[str, Any]:
    results = [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": pool, "device": "gpu-0", "shareID": "s1"},
               {"request": "gpu", "driver": "other.example.com", "pool": "x", "device": "nic-0"},
               {"request": "mig", "driver": "gpu.nvidia.com", "pool": pool, "device": "gpu-5-mig-1g.10gb-0"}]
    status = {"allocation": {"devices": {"results": results}}} if allocated else {}
    return {"metadata": {"name": "c", "namespace": "ns", "uid": uid}, "status": status}


class Kubelet:
    """What the kubelet does with a plugin: dial its sockets and call its methods."""

    def __init__(self, servers: draplugin.Servers) -> None:
        self.reg = grpc.insecure_channel(f"unix://{servers.reg_socket}")
        self.dra = grpc.insecure_channel(f"unix://{servers.dra_socket}")
        self.health = grpc.insecure_channel(f"127.0.0.1:{servers.health_port}")

    def call(self, channel: grpc.Channel, method: str, request: bytes) -> bytes:
        fn = channel.unary_unary(method, request_serializer=bytes, response_deserializer=bytes)
        out: bytes = fn(request, timeout=10)
        return out

    def check(self, service: str) -> int:
        return pw.integer(pw.decode(self.call(self.health, "/grpc.health.v1.Health/Check", pw.encode([(1, service)]))), 1)

    def prepare(self, *claims: tuple[str, str, str]) -> dict[str, pw.Fields]:
        req = pw.encode([(1, pw.encode([(1, ns), (2, uid), (3, name)])) for ns, uid, name in claims])
        out = self.call(self.dra, f"/{draplugin.DRA_SERVICE}/NodePrepareResources", req)
        return {k: pw.decode(v) for k, v in pw.decode_map(pw.decode(out), 1).items()}

    def unprepare(self, *claims: tuple[str, str, str]) -> dict[str, pw.Fields]:
        req = pw.encode([(1, pw.encode([(1, ns), (2, uid), (3, name)])) for ns, uid, name in claims])
        out = self.call(self.dra, f"/{draplugin.DRA_SERVICE}/NodeUnprepareResources", req)
        return {k: pw.decode(v) for k, v in pw.decode_map(pw.decode(out), 1).items()}

    def close(self) -> None:
        for ch in (self.reg, self.dra, self.health):
            ch.close()


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[tuple[Kubelet, draplugin.Servers, dict[str, Mapping[str, Any]]]]:
    claims: dict[str, Mapping[str, Any]] = {}

    def read_claim(namespace: str, name: str) -> Mapping[str, Any]:
        if name not in claims:
            raise RuntimeError(f"resourceclaims {name!r} not found")
        return claims[name]

    preparer = draplugin.Preparer("worker-1", tmp_path / "cdi", read_claim)
    logged: list[str] = []
    servers = draplugin.Servers(preparer, tmp_path / "registry", tmp_path / "plugins", "127.0.0.1:0", log=logged.append)
    servers.start()
    kubelet = Kubelet(servers)
    try:
        yield kubelet, servers, claims
    finally:
        kubelet.close()
        servers.stop()
    assert not servers.reg_socket.exists() and not servers.dra_socket.exists()


def test_registration_names_the_driver_its_socket_and_api_version(plugin: Any) -> None:
    kubelet, servers, _claims = plugin
    assert servers.reg_socket.name == "gpu.nvidia.com-reg.sock"
    info = pw.decode(kubelet.call(kubelet.reg, "/pluginregistration.Registration/GetInfo", b""))
    assert (pw.string(info, 1), pw.string(info, 2), pw.string(info, 3)) == (
        "DRAPlugin", "gpu.nvidia.com", str(servers.dra_socket))
    assert pw.strings(info, 4) == ["v1.DRAPlugin"]


def test_health_serves_only_after_the_kubelet_confirms_registration(plugin: Any) -> None:
    kubelet, _servers, _claims = plugin
    assert kubelet.check("liveness") == draplugin.NOT_SERVING
    status = "/pluginregistration.Registration/NotifyRegistrationStatus"
    kubelet.call(kubelet.reg, status, pw.encode([(1, True)]))
    assert kubelet.check("liveness") == kubelet.check("") == draplugin.SERVING
    kubelet.call(kubelet.reg, status, pw.encode([(1, False), (2, "version not supported")]))
    assert kubelet.check("liveness") == draplugin.NOT_SERVING
    with pytest.raises(grpc.RpcError) as err:
        kubelet.check("readiness")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_prepare_returns_this_drivers_devices_with_cdi_specs_and_unprepare_removes_them(plugin: Any) -> None:
    kubelet, _servers, claims = plugin
    claims["c"] = _claim()
    got = kubelet.prepare(("ns", UID, "c"))
    assert pw.string(got[UID], 2) == ""
    devices = pw.messages(got[UID], 1)
    assert [(pw.strings(d, 1), pw.string(d, 2), pw.string(d, 3)) for d in devices] == [
        (["gpu"], "worker-1", "gpu-0"), (["mig"], "worker-1", "gpu-5-mig-1g.10gb-0")]
    ids = [pw.strings(d, 4) for d in devices]
    assert ids == [[f"k8s.gpu-catalog.dev/sim-gpu={UID}-0"], [f"k8s.gpu-catalog.dev/sim-gpu={UID}-1"]]
    spec_file = _spec(plugin)
    spec = json.loads(spec_file.read_text())
    assert spec["kind"] == "k8s.gpu-catalog.dev/sim-gpu" and [d["name"] for d in spec["devices"]] == [f"{UID}-0", f"{UID}-1"]
    env = [e for d in spec["devices"] for e in d["containerEdits"]["env"]]
    assert env == [f"GPU_CATALOG_SIM_GPU_{UID.replace('-', '')}_0=worker-1/gpu-0 share s1",
                   f"GPU_CATALOG_SIM_GPU_{UID.replace('-', '')}_1=worker-1/gpu-5-mig-1g.10gb-0"]
    assert kubelet.prepare(("ns", UID, "c"))[UID] == got[UID]  # the kubelet may ask again
    assert kubelet.unprepare(("ns", UID, "c")) == {UID: {}}
    assert not spec_file.exists()
    assert kubelet.unprepare(("ns", UID, "c")) == {UID: {}}  # and again


def _spec(plugin: Any) -> Path:
    _kubelet, servers, _claims = plugin
    path: Path = servers.preparer.spec_path(UID)
    assert path.is_file()
    return path


@pytest.mark.parametrize(("claim", "expected"), [
    (None, "reading ResourceClaim ns/c: resourceclaims 'c' not found"),
    (_claim(allocated=False), "ResourceClaim ns/c is not allocated"),
    (_claim(pool="worker-2"), "holds devices of pool(s) ['worker-2']; this plugin serves node worker-1"),
    (_claim(uid="another"), f"has UID another, the kubelet asked for {UID}"),
])
def test_a_claim_that_cannot_be_prepared_gets_its_reason_and_no_spec(plugin: Any, claim: Any, expected: str) -> None:
    kubelet, servers, claims = plugin
    if claim is not None:
        claims["c"] = claim
    claims["ok"] = {**_claim(uid="u2"), "metadata": {"name": "ok", "namespace": "ns", "uid": "u2"}}
    got = kubelet.prepare(("ns", UID, "c"), ("ns", "u2", "ok"))
    assert expected in pw.string(got[UID], 2) and not pw.messages(got[UID], 1)
    assert not servers.preparer.spec_path(UID).exists()
    assert pw.string(got["u2"], 2) == "" and len(pw.messages(got["u2"], 1)) == 2  # the other claim is prepared
