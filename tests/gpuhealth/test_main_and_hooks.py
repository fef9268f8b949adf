"""Entry point, actuators and the import boundary, run for real (commands, a local HTTP server)."""

from __future__ import annotations

import ast
import http.server
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpucatalog.gpuhealth import actuator, main
from gpucatalog.gpuhealth.errors import ConfigError, TemporaryError
from gpucatalog.gpuhealth.xidpolicy import Action

from .conftest import SimNode

PKG = Path(__file__).resolve().parents[2] / "gpucatalog" / "gpuhealth"


def verify_args(node: SimNode) -> list[str]:
    return ["verify", f"--host-root={node.root}", f"--nvidia-smi={node.smi}", "--expect-gpus=8",
            "--expect-pcie-width=16", "--expect-nvlinks=18", "--expect-ib-rate=400"]


def test_verify_exit_codes(sim_node: SimNode, capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(verify_args(sim_node)) == 0
    assert json.loads(capsys.readouterr().out)["healthy"] is True
    sim_node.kmsg("NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=x, An uncorrectable double bit error")
    assert main.main(verify_args(sim_node)) == 1
    out = json.loads(capsys.readouterr().out)
    xid = next(c for c in out["conditions"] if c["type"] == "GpuXidError")
    assert xid["message"].startswith("action=RESET_GPU; GPU 0 (PCI 0000:18:00")


@pytest.mark.parametrize(
    "argv",
    [
        ["agent"],  # no --node and no NODE_NAME
        ["verify", "--xid-action", "94"],
        ["verify", "--reason-action", "Bogus=REBOOT"],
        ["verify", "--expect-gpus", "eight"],
        ["controller", "--namespace", "x", "--breaker-max-share", "1.5"],
        ["controller", "--namespace", "x", "--actuator-config", "{not json"],
        ["controller", "--namespace", "x", "--actuator-config", '{"kind": "magic"}'],
    ],
)
def test_bad_flags_exit_2(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main.main(argv) == 2
    assert capsys.readouterr().err.startswith("gpu-health: ")


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main.main(["--help"])
    assert "gpu-health agent --node gpu-0" in capsys.readouterr().out


def test_command_actuator_runs_hooks_for_real(tmp_path: Path) -> None:
    marker = tmp_path / "done"
    act = actuator.from_config({"kind": "command", "commands": {
        "RESET_GPU": [sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", str(marker),
                      "{node}:{action}"],
        "REBOOT": [sys.executable, "-c", "import sys; sys.exit(3)"]}})
    assert act.repair("gpu-0", Action.RESET_GPU, "x")[0] == "succeeded"
    assert marker.read_text() == "gpu-0:RESET_GPU"
    result, detail = act.repair("gpu-0", Action.REBOOT, "x")
    assert result == "failed" and detail.startswith("exit 3")
    assert act.repair("gpu-0", Action.HARDWARE_REPAIR, "x") == ("failed", "no command hook configured for HARDWARE_REPAIR")
    with pytest.raises(ConfigError):
        actuator.from_config({"kind": "command", "commands": {"PANIC": ["x"]}})


@pytest.fixture
def ticket_server() -> Iterator[tuple[str, list[dict[str, str]], list[int]]]:
    seen: list[dict[str, str]] = []
    status = [201]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(status[0])
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/tickets", seen, status
    finally:
        srv.shutdown()
        srv.server_close()


def test_hardware_repair_ticket_webhook(ticket_server: tuple[str, list[dict[str, str]], list[int]]) -> None:
    url, seen, status = ticket_server
    act = actuator.from_config({"kind": "none", "hardwareRepair": {"webhookUrl": url}})
    assert act.repair("gpu-3", Action.HARDWARE_REPAIR, "row remap failure")[0] == "succeeded"
    assert seen == [{"node": "gpu-3", "action": "HARDWARE_REPAIR", "reason": "row remap failure"}]
    status[0] = 503
    with pytest.raises(TemporaryError):
        act.repair("gpu-3", Action.HARDWARE_REPAIR, "again")
    status[0] = 400
    assert act.repair("gpu-3", Action.HARDWARE_REPAIR, "bad")[0] == "failed"


def test_gpuhealth_never_imports_the_rest_of_gpucatalog() -> None:
    forbidden = ("gpucatalog.catalog", "gpucatalog.validators", "gpucatalog.pipelines", "gpucatalog.toolchain")
    for path in PKG.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith(forbidden), f"{path.name} imports {name}"


def test_public_facade_lists_every_module() -> None:
    import gpucatalog.gpuhealth as gh

    modules = {p.stem for p in PKG.glob("*.py")} - {"__init__", "gen_xid_data"}
    assert set(gh.__all__) == modules


def test_xid_data_matches_nvidia_catalog_csv() -> None:
    from gpucatalog.gpuhealth import gen_xid_data

    csv_path = Path("/work/shared/data/xid-catalog.csv")
    if not csv_path.exists():
        pytest.skip("NVIDIA XID catalog CSV not on this machine")
    assert gen_xid_data.render(csv_path) == (PKG / "data" / "xid_catalog.json").read_text()
