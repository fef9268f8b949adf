"""Fixtures for gpu-health tests: realistic driver outputs and a simulated node folder.

The simulated node folder has the layout the agent reads on a real node (``dev/kmsg``,
``sys/class/infiniband``, an ``nvidia-smi`` executable). The executable is the only fake: it
prints fixture files, standing in for a GPU that cannot exist here.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


@dataclass
class SimNode:
    root: Path

    @property
    def smi(self) -> Path:
        return self.root / "usr" / "bin" / "nvidia-smi"

    def set_smi_xml(self, text: str) -> None:
        (self.root / "var" / "sim" / "nvidia-smi.xml").write_text(text, encoding="utf-8")

    def set_nvlink(self, text: str) -> None:
        (self.root / "var" / "sim" / "nvlink.txt").write_text(text, encoding="utf-8")

    def kmsg(self, *lines: str) -> None:
        with (self.root / "dev" / "kmsg").open("a", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line + "\n")

    def ib_port(self, dev: str, port: int, state: str, rate: str) -> None:
        p = self.root / "sys" / "class" / "infiniband" / dev / "ports" / str(port)
        p.mkdir(parents=True, exist_ok=True)
        (p / "state").write_text(state + "\n")
        (p / "rate").write_text(rate + "\n")
        (p / "phys_state").write_text("5: LinkUp\n")
        (p / "link_layer").write_text("InfiniBand\n")


SMI_SCRIPT = """#!/bin/sh
# sim-only stand-in for the NVIDIA driver's nvidia-smi: prints what the test put in var/sim
here="$(dirname "$0")/../../var/sim"
if [ "$1" = "nvlink" ]; then cat "$here/nvlink.txt"; exit 0; fi
if [ -f "$here/smi-exit" ]; then cat "$here/nvidia-smi.xml"; exit "$(cat "$here/smi-exit")"; fi
cat "$here/nvidia-smi.xml"
"""


@pytest.fixture
def sim_node(tmp_path: Path) -> SimNode:
    root = tmp_path / "node"
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "kmsg").write_text(fixture_text("kmsg_boot.txt"), encoding="utf-8")
    (root / "var" / "sim").mkdir(parents=True)
    (root / "usr" / "bin").mkdir(parents=True)
    node = SimNode(root)
    node.smi.write_text(SMI_SCRIPT)
    node.smi.chmod(node.smi.stat().st_mode | stat.S_IXUSR)
    node.set_smi_xml(fixture_text("nvsmi_h200x8_healthy.xml"))
    node.set_nvlink(fixture_text("nvlink_h200x8_healthy.txt"))
    for i in range(8):
        node.ib_port(f"mlx5_{i}", 1, "4: ACTIVE", "400 Gb/sec (4X NDR)")
    return node


@pytest.fixture
def edit_gpu() -> Callable[[str, int, str, str], str]:
    """Replace one element's text inside GPU ``index`` of an nvidia-smi XML dump."""

    def edit(xml: str, index: int, tag: str, value: str) -> str:
        start = xml.index(f"<minor_number>{index}</minor_number>")
        end = xml.index("</gpu>", start)
        block = xml[start:end]
        open_tag, close_tag = f"<{tag}>", f"</{tag}>"
        a = block.index(open_tag) + len(open_tag)
        b = block.index(close_tag, a)
        return xml[:start] + block[:a] + value + block[b:] + xml[end:]

    return edit


def executable(path: Path) -> bool:
    return os.access(path, os.X_OK)
