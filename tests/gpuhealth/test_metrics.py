"""The agent's per-GPU metrics: the exposition format and its labels, the values read from the
real ``nvidia-smi -q -x`` dumps of the shared corpus (read where they live, never copied here),
what is left out when the driver does not say (N/A) or the probe failed, the per-GPU verdict and
XID count through the real probe path, and the endpoint on loopback."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from gpucatalog.gpuhealth import main, metrics, parse_nvsmi, probes
from gpucatalog.gpuhealth.findings import Expectations, Observation
from gpucatalog.validators.conformance.metrics import prom_text

from . import smi_corpus
from .conftest import SimNode, fixture_text

DUMPS = smi_corpus.dumps()
needs_corpus = pytest.mark.skipif(
    not DUMPS, reason=f"no nvidia-smi corpus at {smi_corpus.corpus_dir()} (set {smi_corpus.ENV})")
# one exposition line: a comment, or name{labels} value
LINE = re.compile(r'^(# (HELP|TYPE) gpu_health_[a-z_]+ .+|gpu_health_[a-z_]+\{([a-z_]+="(?:[^"\\]|\\.)*",?)+\} '
                  r'-?[0-9.e+]+)$')
AT = 1_700_000_000.5


def _obs(xml: str) -> Observation:
    obs = Observation()
    obs.smi = parse_nvsmi.parse(xml)
    return obs


def _series(text: str) -> dict[str, list[prom_text.Sample]]:
    out: dict[str, list[prom_text.Sample]] = {}
    for s in prom_text.parse(text):
        out.setdefault(s.name, []).append(s)
    return out


def _value(series: dict[str, list[prom_text.Sample]], name: str) -> float | None:
    found = series.get("gpu_health_" + name, [])
    assert len(found) <= 1
    return found[0].value if found else None


def test_format_every_line_and_one_help_and_type_per_family() -> None:
    text = metrics.render("gpu-0", _obs(fixture_text("nvsmi_h200x8_healthy.xml")), AT)
    assert text.endswith("\n")
    for line in text.splitlines():
        assert LINE.match(line), line
    helps = [line.split()[2] for line in text.splitlines() if line.startswith("# HELP")]
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert helps == types and len(helps) == len(set(helps))  # each family announced once, before its samples
    assert all(line.endswith(" gauge") for line in text.splitlines() if line.startswith("# TYPE"))
    names_in_order = [line.split("{")[0] for line in text.splitlines() if not line.startswith("#")]
    assert names_in_order == sorted(names_in_order, key=helps.index)  # samples grouped under their family


def test_eight_gpus_one_series_each_with_their_labels() -> None:
    smi = parse_nvsmi.parse(fixture_text("nvsmi_h200x8_healthy.xml"))
    series = _series(metrics.render("gpu-0", _obs(fixture_text("nvsmi_h200x8_healthy.xml")), AT))
    info = series["gpu_health_gpu_info"]
    assert [s.labels["gpu"] for s in info] == [str(i) for i in range(8)]
    assert {s.labels["uuid"] for s in info} == {g.uuid for g in smi.gpus}
    assert {s.labels["model_name"] for s in info} == {"NVIDIA H200"}
    assert all(s.labels["node"] == "gpu-0" and s.value == 1 for s in info)
    assert info[0].labels["driver_version"] == smi.driver_version
    for name in ("gpu_memory_used_bytes", "gpu_memory_total_bytes", "gpu_temperature_celsius", "gpu_power_draw_watts",
                 "gpu_healthy", "gpu_xid_errors", "gpu_row_remap_pending"):
        assert len(series["gpu_health_" + name]) == 8, name
    assert "gpu_health_gpu_utilization_ratio" not in series  # this dump has no <utilization>: no sample made up
    assert len(series["gpu_health_gpu_remapped_rows"]) == 16  # correctable and uncorrectable per GPU
    assert _value(series, "node_gpus") == 8 and _value(series, "last_cycle_timestamp_seconds") == AT


def test_label_values_are_escaped() -> None:
    text = metrics.render('n "1" \\ a\nb', _obs(fixture_text("nvsmi_h200x8_healthy.xml")), AT)
    assert 'node="n \\"1\\" \\\\ a\\nb"' in text
    for line in text.splitlines():
        assert LINE.match(line), line
    info = [s for s in prom_text.parse(text) if s.name == "gpu_health_gpu_info"]
    assert info[2].labels["node"] == 'n "1" \\ a\nb'  # the escaping reads back


@needs_corpus
@pytest.mark.parametrize("dump", DUMPS, ids=lambda p: p.stem)
def test_real_dump_values_are_the_driver_readings(dump: Path) -> None:
    g = parse_nvsmi.parse(dump.read_text()).gpus[0]
    series = _series(metrics.render("n", _obs(dump.read_text()), AT))
    (info,) = series["gpu_health_gpu_info"]
    assert info.labels == {"node": "n", "gpu": str(g.index), "uuid": g.uuid, "model_name": g.product,
                           "pci_bus_id": g.pci_bus_id, "driver_version": info.labels["driver_version"]}
    assert g.memory_total_mib and g.memory_used_mib is not None and g.temperature_c is not None
    assert _value(series, "gpu_memory_total_bytes") == g.memory_total_mib * 1024 * 1024
    assert _value(series, "gpu_memory_used_bytes") == g.memory_used_mib * 1024 * 1024
    assert _value(series, "gpu_temperature_celsius") == g.temperature_c
    util = _value(series, "gpu_utilization_ratio")
    assert util == (None if g.gpu_util_percent is None else g.gpu_util_percent / 100)
    assert _value(series, "gpu_power_draw_watts") == g.power_draw_w
    assert _value(series, "gpu_healthy") == 1 and _value(series, "gpu_xid_errors") == 0


@needs_corpus
@pytest.mark.parametrize(("stem", "util", "used_mib", "temp", "draw", "limit"), [
    ("rtx-3080-v13", 0.65, 9184, 27, 142.33, 320.0),  # busy (P2), R550+ instant_power_draw
    ("tesla-t4", 0.0, 1032, 40, 26.78, 70.0),  # R4xx power_readings + enforced_power_limit
    ("a100-sxm4-v12", None, 50, 27, 67.03, 500.0),  # MIG mode: utilisation N/A -> no sample
    ("quadro-p400", 0.0, 0, 33, None, None),  # power N/A -> no power samples
])
def test_known_readings_of_real_dumps(stem: str, util: float | None, used_mib: int, temp: int,
                                      draw: float | None, limit: float | None) -> None:
    xml = (smi_corpus.corpus_dir() / f"{stem}.xml").read_text()
    series = _series(metrics.render("n", _obs(xml), AT))
    assert _value(series, "gpu_utilization_ratio") == util
    assert _value(series, "gpu_memory_used_bytes") == used_mib * 1024 * 1024
    assert _value(series, "gpu_temperature_celsius") == temp
    assert _value(series, "gpu_power_draw_watts") == draw
    assert _value(series, "gpu_power_limit_watts") == limit


def test_verdict_and_xids_per_gpu_through_the_probes(sim_node: SimNode,
                                                     edit_gpu: Callable[[str, int, str, str], str]) -> None:
    """The real probe path (the agent's nvidia-smi command and kernel log): a pending row remap on
    GPU 3 and an XID 79 on GPU 5 make those two GPUs unhealthy, the others stay healthy."""
    xml = fixture_text("nvsmi_h200x8_healthy.xml")
    sim_node.set_smi_xml(edit_gpu(xml, 3, "remapped_row_pending", "Yes"))
    bus = parse_nvsmi.parse(xml).gpus[5].pci_bus_id
    sim_node.kmsg(f"NVRM: Xid (PCI:{bus}): 79, pid=1234, name=python3, GPU has fallen off the bus.")
    cfg = probes.ProbeConfig.under_host_root(sim_node.root, Expectations(gpu_count=8), nvidia_smi=(str(sim_node.smi),))
    obs = probes.observe(cfg)
    series = _series(metrics.render("gpu-0", obs, AT))
    healthy = {s.labels["gpu"]: s.value for s in series["gpu_health_gpu_healthy"]}
    assert healthy == {str(i): (0 if i in (3, 5) else 1) for i in range(8)}
    xids = {s.labels["gpu"]: s.value for s in series["gpu_health_gpu_xid_errors"]}
    assert xids == {str(i): (1 if i == 5 else 0) for i in range(8)}
    pending = {s.labels["gpu"]: s.value for s in series["gpu_health_gpu_row_remap_pending"]}
    assert pending["3"] == 1 and sum(pending.values()) == 1
    assert _value(series, "node_healthy") == 0 and _value(series, "probe_failures") == 0


def test_a_failed_nvidia_smi_serves_no_stale_gpu_series(sim_node: SimNode) -> None:
    sim_node.set_smi_xml("<nvidia_smi_log><gpu")  # truncated output
    cfg = probes.ProbeConfig.under_host_root(sim_node.root, Expectations(), nvidia_smi=(str(sim_node.smi),))
    series = _series(metrics.render("gpu-0", probes.observe(cfg), AT))
    assert not [name for name in series if name.startswith("gpu_health_gpu_")]
    assert "gpu_health_node_gpus" not in series
    assert _value(series, "probe_failures") == 1


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_the_endpoint_on_loopback() -> None:
    exporter = metrics.Exporter("gpu-0")
    server = metrics.serve(exporter, "127.0.0.1:0")
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        code, _ctype, body = _get(base + "/metrics")
        assert code == 503 and "no probe cycle" in body  # nothing read yet: nothing served as current
        exporter.update(_obs(fixture_text("nvsmi_h200x8_healthy.xml")), AT)
        code, ctype, body = _get(base + "/metrics")
        assert code == 200 and ctype == metrics.CONTENT_TYPE
        assert len([s for s in prom_text.parse(body) if s.name == "gpu_health_gpu_info"]) == 8
        assert _get(base + "/healthz")[0] == 404  # only /metrics
    finally:
        server.shutdown()
        server.server_close()


def test_a_bad_metrics_address_is_exit_2(sim_node: SimNode, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gpucatalog.gpuhealth.main", "--kubeconfig", str(kubeconfig), "agent", "--node", "gpu-0",
         "--host-root", str(sim_node.root), "--nvidia-smi", str(sim_node.smi), "--metrics-addr", "9464"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--metrics-addr '9464': expected HOST:PORT" in proc.stderr
    assert main.parser().parse_args(["agent", "--node", "n"]).metrics_addr == ""  # off unless asked for
