"""``gpu-health inject-xid``: one synthetic XID record where the agent reads the kernel log (a
sim node folder's regular file, or a character device: a pseudo-terminal stands in for
/dev/kmsg, as both are character devices and one write arrives as one read), the GPU resolved
through nvidia-smi as the agent resolves it, and ``--clear`` only where the log can be edited."""

from __future__ import annotations

import json
import os
import pty
import re
import tty
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpucatalog.gpuhealth import inject, main, parse_kmsg, probes
from gpucatalog.gpuhealth.findings import Expectations

from .conftest import SimNode

GPU2_PCI = "0000:3a:00"  # GPU index 2 of nvsmi_h200x8_healthy.xml
GPU2_UUID = "GPU-0e4f7a9c-2d3b-4a1e-8f6c-9b7d5e3c1a20"


def _args(node: SimNode, *extra: str, kmsg: Path | None = None) -> list[str]:
    return ["inject-xid", f"--host-root={node.root}", f"--nvidia-smi={node.smi}",
            *([f"--kmsg-path={kmsg}"] if kmsg else []), *extra]


def _xids(node: SimNode) -> list[parse_kmsg.XidEvent]:
    return parse_kmsg.parse((node.root / "dev" / "kmsg").read_text()).xids


def test_xid_lands_as_a_record_the_agent_reads_naming_the_gpu(sim_node: SimNode,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    before = (sim_node.root / "dev" / "kmsg").read_text()
    assert main.main(_args(sim_node, "--code", "79", "--gpu", "2")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["device"] is False and out["kmsg"] == str(sim_node.root / "dev" / "kmsg")
    after = (sim_node.root / "dev" / "kmsg").read_text()
    assert after.startswith(before)
    last = after.splitlines()[-1]
    last_seq = max(int(ln.split(",")[1]) for ln in before.splitlines() if ln[:1].isdigit())
    assert last.startswith(f"4,{last_seq + 1},") and ",-;NVRM: Xid (PCI:0000:3a:00): 79, " in last
    assert "name=gpu-catalog-inject" in last and "synthetic" in last
    # the agent's own probes see it: XID 79 on GPU 2, asking for a reboot
    cfg = probes.ProbeConfig.under_host_root(sim_node.root, Expectations(), nvidia_smi=(str(sim_node.smi),))
    found = [f for f in probes.observe(cfg).findings if f.reason == "Xid79"]
    assert len(found) == 1 and "GPU 2 " in found[0].subject and GPU2_PCI in found[0].subject
    assert found[0].action.name == "REBOOT"


@pytest.mark.parametrize("extra, says", [
    (["--code", "79", "--gpu", "9"], "--gpu 9: nvidia-smi lists no such GPU on this node (GPUs: 0, 1, 2"),
    (["--code", "79"], "needs --code and --gpu"),
    (["--code", "0", "--gpu", "1"], "--code 0"),
])
def test_bad_requests_exit_2_and_write_nothing(sim_node: SimNode, extra: list[str], says: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    before = (sim_node.root / "dev" / "kmsg").read_text()
    assert main.main(_args(sim_node, *extra)) == 2
    assert says in capsys.readouterr().err
    assert (sim_node.root / "dev" / "kmsg").read_text() == before


def test_no_nvidia_smi_means_no_gpu_to_name(sim_node: SimNode, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["inject-xid", f"--host-root={sim_node.root}", "--nvidia-smi=/nonexistent/nvidia-smi", "--code=79",
            "--gpu=0"]
    assert main.main(argv) == 2
    assert "cannot resolve --gpu 0 to its PCI bus id" in capsys.readouterr().err


def test_clear_removes_only_the_synthetic_records_in_place(sim_node: SimNode) -> None:
    kmsg = sim_node.root / "dev" / "kmsg"
    sim_node.kmsg("4,9000,1,-;NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=python3, An uncorrectable double bit error")
    assert main.main(_args(sim_node, "--code", "79", "--gpu", "2")) == 0
    assert main.main(_args(sim_node, "--code", "13", "--gpu", "1")) == 0
    assert [x.xid for x in _xids(sim_node)] == [48, 79, 13]
    inode = kmsg.stat().st_ino
    assert main.main(_args(sim_node, "--clear")) == 0
    assert [x.xid for x in _xids(sim_node)] == [48]  # the driver's own line stays
    assert kmsg.stat().st_ino == inode  # pods bind-mount the file: it must stay the same file
    assert main.main(_args(sim_node, "--clear")) == 0  # nothing left: still fine


def test_each_injection_is_its_own_line(sim_node: SimNode) -> None:
    """The agent reports one Event per distinct line: the same XID injected twice on one GPU (a
    second certification on a kept cluster) must be seen again, as a real fault's new pid is."""
    assert main.main(_args(sim_node, "--code", "13", "--gpu", "1")) == 0
    assert main.main(_args(sim_node, "--code", "13", "--gpu", "1")) == 0
    first, second = [x.raw for x in _xids(sim_node)]
    assert first != second


def test_a_retried_injection_writes_one_line(sim_node: SimNode, capsys: pytest.CaptureFixture[str]) -> None:
    """The pod injector retries a pod removed before it reported (a drain evicts a pod still
    Pending, and such a pod may have run): the same --injection id is written once."""
    assert main.main(_args(sim_node, "--code", "79", "--gpu", "2", "--injection", "feed0001")) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["record"].endswith("injection feed0001)") and "alreadyWritten" not in first
    assert main.main(_args(sim_node, "--code", "79", "--gpu", "2", "--injection", "feed0001")) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["alreadyWritten"] is True and again["record"] == first["record"]
    assert main.main(_args(sim_node, "--code", "79", "--gpu", "2", "--injection", "feed0002")) == 0
    assert [x.xid for x in _xids(sim_node)] == [79, 79]
    assert main.main(_args(sim_node, "--code", "79", "--gpu", "2", "--injection", "../x")) == 2
    assert "--injection '../x'" in capsys.readouterr().err
    assert len(_xids(sim_node)) == 2


@pytest.fixture
def chardev() -> Iterator[tuple[int, Path]]:
    """A character device to write to and read from: a pseudo-terminal in raw mode (no echo,
    no newline translation). Yields (master fd, slave path)."""
    master, slave = pty.openpty()
    tty.setraw(slave)
    try:
        yield master, Path(os.ttyname(slave))
    finally:
        os.close(master)
        os.close(slave)


def test_a_character_device_gets_one_prefixed_write(sim_node: SimNode, chardev: tuple[int, Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    master, dev = chardev
    assert main.main(_args(sim_node, "--code", "79", "--gpu", "2", kmsg=dev)) == 0
    assert json.loads(capsys.readouterr().out)["device"] is True
    got = os.read(master, 4096)
    assert re.fullmatch(rf"<4>NVRM: Xid \(PCI:{GPU2_PCI}\): 79, pid='<unknown>', name=gpu-catalog-inject, synthetic "
                        r"XID 79 written by gpu-health inject-xid \(a test fault, not a hardware error; injection "
                        r"[0-9a-f]{8}\)\n", got.decode())
    assert parse_kmsg.parse(got.decode()[3:]).xids[0].pci == GPU2_PCI


def test_a_real_kernel_log_is_cleared_only_by_the_nodes_repair(sim_node: SimNode, chardev: tuple[int, Path],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    master, dev = chardev
    record = "12,7001,5,-;" + inject.message(GPU2_PCI, 79) + "\n"
    os.write(master, record.encode())  # what reading /dev/kmsg would return after the injection
    assert main.main(_args(sim_node, "--clear", kmsg=dev)) == 2
    err = capsys.readouterr().err
    assert "cannot be edited" in err and "XID 79 on 0000:3a:00" in err and "node's repair (a reboot" in err
    # a logged successful GPU reset of that GPU (nvidia-smi names its UUID) clears it
    os.write(master, (record + f"6,7002,9,-;GPU reset executed: {GPU2_UUID}, success: true\n").encode())
    assert main.main(_args(sim_node, "--clear", kmsg=dev)) == 0
    assert "no synthetic XID is active" in capsys.readouterr().out
    # the driver's own XIDs are none of inject-xid's business
    os.write(master, b"4,7003,9,-;NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=python3, DBE\n")
    assert main.main(_args(sim_node, "--clear", kmsg=dev)) == 0
