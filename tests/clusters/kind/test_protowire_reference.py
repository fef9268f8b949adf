"""The hand-written wire format of the DRA stand-in against protobuf's own implementation: the
kubelet's DRA v1 and registration messages, declared here field by field as the upstream .proto
files declare them, encoded by protobuf and by :mod:`protowire`, must give the same bytes, and
each must read what the other wrote."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # a dev dependency (pyproject)

from gpucatalog.clusters.kind import draplugin
from gpucatalog.clusters.kind import protowire as pw

F = descriptor_pb2.FieldDescriptorProto
STRING, BOOL, MESSAGE = F.TYPE_STRING, F.TYPE_BOOL, F.TYPE_MESSAGE
ONE, MANY = F.LABEL_OPTIONAL, F.LABEL_REPEATED


def _messages() -> dict[str, Any]:
    """The messages of k8s.io/kubelet/pkg/apis/dra/v1/api.proto and pluginregistration's api.proto."""
    fd = descriptor_pb2.FileDescriptorProto(name="kubelet_test.proto", package="t", syntax="proto3")

    def msg(name: str, *fields: tuple[str, int, int, int, str | None], map_entry: bool = False) -> Any:
        m = fd.message_type.add(name=name)
        if map_entry:
            m.options.map_entry = True
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
        return m

    msg("Claim", ("namespace", 1, STRING, ONE, None), ("uid", 2, STRING, ONE, None), ("name", 3, STRING, ONE, None))
    msg("NodePrepareResourcesRequest", ("claims", 1, MESSAGE, MANY, ".t.Claim"))
    msg("Device", ("request_names", 1, STRING, MANY, None), ("pool_name", 2, STRING, ONE, None),
        ("device_name", 3, STRING, ONE, None), ("cdi_device_ids", 4, STRING, MANY, None))
    msg("NodePrepareResourceResponse", ("devices", 1, MESSAGE, MANY, ".t.Device"), ("error", 2, STRING, ONE, None))
    resp = msg("NodePrepareResourcesResponse", ("claims", 1, MESSAGE, MANY, ".t.NodePrepareResourcesResponse.ClaimsEntry"))
    entry = resp.nested_type.add(name="ClaimsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=STRING, label=ONE)
    entry.field.add(name="value", number=2, type=MESSAGE, label=ONE, type_name=".t.NodePrepareResourceResponse")
    msg("PluginInfo", ("type", 1, STRING, ONE, None), ("name", 2, STRING, ONE, None), ("endpoint", 3, STRING, ONE, None),
        ("supported_versions", 4, STRING, MANY, None))
    msg("RegistrationStatus", ("plugin_registered", 1, BOOL, ONE, None), ("error", 2, STRING, ONE, None))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return {m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"t.{m.name}")) for m in fd.message_type}


M = _messages()


def test_plugin_info_is_the_bytes_protobuf_writes() -> None:
    ref = M["PluginInfo"](type="DRAPlugin", name="gpu.nvidia.com", endpoint="/var/lib/kubelet/plugins/gpu.nvidia.com/dra.sock",
                          supported_versions=["v1.DRAPlugin"])
    assert draplugin.plugin_info(ref.endpoint) == ref.SerializeToString(deterministic=True)


def test_a_prepare_request_protobuf_writes_is_read_claim_by_claim() -> None:
    req = M["NodePrepareResourcesRequest"]()
    for i in range(3):
        req.claims.add(namespace=f"ns{i}", uid=f"uid-{i}", name=f"claim-{i}")
    got = draplugin.parse_claims(req.SerializeToString())
    assert got == [draplugin.Claim(f"ns{i}", f"uid-{i}", f"claim-{i}") for i in range(3)]


def test_a_prepare_response_written_here_is_read_by_protobuf_and_written_alike() -> None:
    ok = pw.encode([(1, pw.encode([(1, "gpu"), (2, "node-a"), (3, "gpu-0"), (4, "k8s.gpu-catalog.dev/sim-gpu=u1-0")])),
                    (1, pw.encode([(2, "node-a"), (3, "gpu-1")]))])
    failed = pw.encode([(2, "ResourceClaim ns/c is not allocated")])
    ours = pw.encode(pw.encode_map(1, {"u1": ok, "u2": failed, "u3": b""}))
    ref = M["NodePrepareResourcesResponse"]()
    ref.ParseFromString(ours)
    assert ref.claims["u1"].devices[0].cdi_device_ids == ["k8s.gpu-catalog.dev/sim-gpu=u1-0"]
    assert ref.claims["u1"].devices[1].request_names == [] and ref.claims["u1"].devices[1].device_name == "gpu-1"
    assert ref.claims["u2"].error == "ResourceClaim ns/c is not allocated" and not ref.claims["u2"].devices
    assert "u3" in ref.claims and ref.claims["u3"].error == ""
    assert ours == ref.SerializeToString(deterministic=True)


@pytest.mark.parametrize("registered", [True, False])
def test_a_registration_status_protobuf_writes_is_read(registered: bool) -> None:
    data = M["RegistrationStatus"](plugin_registered=registered, error="" if registered else "no").SerializeToString()
    fields = pw.decode(data)
    assert bool(pw.integer(fields, 1)) is registered and pw.string(fields, 2) == ("" if registered else "no")
