"""gpu-health judged by real GPUs: every real ``nvidia-smi -q -x`` dump of the shared corpus
parses, yields no finding under its platform's expectations (nor without any), and each edited
variant yields exactly the right finding and action. The dumps are read where they live
(``../shared/data/nvidia-smi``, or ``$GPU_HEALTH_SMI_CORPUS``), never copied into the repository.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog.gpuhealth import conditions, parse_nvsmi, pcie, probes
from gpucatalog.gpuhealth.findings import Expectations, Family, Observation

from . import smi_corpus
from .conftest import SimNode

RULES = pcie.PcieRules()
DUMPS = smi_corpus.dumps()
PLATFORMS = smi_corpus.platforms()

needs_corpus = pytest.mark.skipif(
    not DUMPS, reason=f"no nvidia-smi corpus at {smi_corpus.corpus_dir()} (set {smi_corpus.ENV})")


def ids(p: Path) -> str:
    return p.stem


def test_every_platform_entry_names_a_dump_and_back() -> None:
    if not DUMPS:
        pytest.skip(f"no nvidia-smi corpus at {smi_corpus.corpus_dir()}")
    assert {p.name for p in DUMPS} == set(PLATFORMS), "tests/gpuhealth/data/smi_platforms.yaml is out of date"


@needs_corpus
@pytest.mark.parametrize("dump", DUMPS, ids=ids)
def test_real_dump_parses(dump: Path) -> None:
    smi = parse_nvsmi.parse(dump.read_text())
    assert len(smi.gpus) == 1
    g = smi.gpus[0]
    assert g.product != "unknown" and g.uuid.startswith("GPU-") and g.pci_bus_id.count(":") == 2
    assert g.pcie_gen_current is not None and g.pcie_width_current is not None
    assert g.performance_state is not None and g.performance_state.startswith("P")


@needs_corpus
@pytest.mark.parametrize("dump", DUMPS, ids=ids)
def test_real_dump_has_no_finding_under_its_platform(dump: Path) -> None:
    xml = dump.read_text()
    # many readings in a row, as an agent would see an unchanged machine: hysteresis hides nothing
    assert smi_corpus.judge(xml, PLATFORMS[dump.name], RULES, readings=RULES.busy_readings + 2) == []


@needs_corpus
@pytest.mark.parametrize("dump", DUMPS, ids=ids)
def test_real_dump_has_no_finding_without_any_expectation(dump: Path) -> None:
    """A new user's first run (no shape values): idle GPUs at gen 1 or x8 are not faults."""
    assert smi_corpus.judge(dump.read_text(), Expectations(), RULES, readings=RULES.busy_readings + 2) == []


@needs_corpus
@pytest.mark.parametrize("dump", DUMPS, ids=ids)
def test_same_machine_busy_on_its_platform_link_has_no_finding(dump: Path) -> None:
    busy = smi_corpus.busy_healthy(dump.read_text(), PLATFORMS[dump.name])
    assert busy is not None
    assert smi_corpus.judge(busy, PLATFORMS[dump.name], RULES, readings=RULES.busy_readings + 2) == []


@needs_corpus
@pytest.mark.parametrize("dump", DUMPS, ids=ids)
def test_same_machine_idle_at_gen1_has_no_finding(dump: Path) -> None:
    idle = smi_corpus.idle_downshifted(dump.read_text())
    assert idle is not None
    assert smi_corpus.judge(idle, PLATFORMS[dump.name], RULES, readings=RULES.busy_readings + 2) == []


def _variants() -> list[smi_corpus.Variant]:
    out: list[smi_corpus.Variant] = []
    for dump in DUMPS:
        out += smi_corpus.variants(dump.name, dump.read_text(), PLATFORMS[dump.name], RULES)
    return out


VARIANTS = _variants()


@needs_corpus
def test_every_dump_has_its_link_variants_and_remapper_dumps_their_memory_variants() -> None:
    by_dump: dict[str, set[str]] = {}
    for v in VARIANTS:
        by_dump.setdefault(v.dump, set()).add(v.name)
    assert all({"x4-at-p0", "gen1-at-p0"} <= names for names in by_dump.values()) and len(by_dump) == len(DUMPS)
    assert sum("row-remap-pending" in n for n in by_dump.values()) >= 8
    assert sum("volatile-uncorrectable-ecc" in n for n in by_dump.values()) >= 10


@needs_corpus
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{Path(v.dump).stem}-{v.name}")
def test_edited_real_dump_yields_exactly_the_right_finding(variant: smi_corpus.Variant) -> None:
    expect = PLATFORMS[variant.dump]
    found = smi_corpus.judge(variant.xml, expect, RULES, readings=variant.readings)
    assert [(f.family, f.reason, f.action) for f in found] == [(variant.family, variant.reason, variant.action)]
    g = parse_nvsmi.parse(variant.xml).gpus[0]
    assert found[0].subject.startswith(f"GPU {g.index} (PCI {g.pci_bus_id}")
    conds, _ = conditions.build(Observation(findings=found))
    cond = next(c for c in conds if c.type == variant.family.value)
    assert cond.status == "True" and cond.message.startswith(f"action={variant.action.name}; ")


@needs_corpus
@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.readings > 1],
                         ids=lambda v: f"{Path(v.dump).stem}-{v.name}")
def test_busy_link_shortfall_needs_consecutive_readings(variant: smi_corpus.Variant) -> None:
    expect = PLATFORMS[variant.dump]
    assert smi_corpus.judge(variant.xml, expect, RULES, readings=variant.readings - 1) == []
    # an idle reading in between neither counts nor resets the streak; a healthy busy one resets it
    real = (smi_corpus.corpus_dir() / variant.dump).read_text()
    healthy_busy_xml, idle_xml = smi_corpus.busy_healthy(real, expect), smi_corpus.idle_downshifted(real)
    assert healthy_busy_xml is not None and idle_xml is not None
    idle, healthy_busy, bad = (parse_nvsmi.parse(x) for x in (idle_xml, healthy_busy_xml, variant.xml))
    history = pcie.LinkHistory()
    for smi in [bad] * (variant.readings - 1) + [healthy_busy] + [bad] * (variant.readings - 1) + [idle]:
        assert pcie.judge(smi, expect, RULES, history)[0] == []
    assert [f.reason for f in pcie.judge(bad, expect, RULES, history)[0]] == [variant.reason]

@needs_corpus
def test_idle_readings_are_recorded_as_notes_not_conditions() -> None:
    a10g = next(d for d in DUMPS if d.name == "a10g.xml")
    smi = parse_nvsmi.parse(a10g.read_text())
    expect = Expectations(gpu_count=1, pcie_gen=4, pcie_width=16)  # a x16 platform idling at gen 1 x8
    findings, notes = pcie.judge(smi, expect, RULES, pcie.LinkHistory())
    assert findings == []
    assert any("gen 1 at P8" in n and "not judged" in n for n in notes)
    assert any("x8 at P8" in n for n in notes)
    conds, _ = conditions.build(Observation(notes={Family.PCIE: notes}))
    pcie_cond = next(c for c in conds if c.type == "GpuPcieDegraded")
    assert pcie_cond.status == "False" and "not judged" in pcie_cond.message


@needs_corpus
@pytest.mark.parametrize("dump", DUMPS, ids=ids)
def test_agent_path_over_a_real_dump(dump: Path, sim_node: SimNode) -> None:
    """The real probe path (nvidia-smi executable -> parser -> checks -> conditions) on each dump."""
    sim_node.set_smi_xml(dump.read_text())
    cfg = probes.ProbeConfig.under_host_root(sim_node.root, PLATFORMS[dump.name], nvidia_smi=(str(sim_node.smi),))
    history = pcie.LinkHistory()
    for _ in range(RULES.busy_readings + 1):
        obs = probes.observe(cfg, links=history)
    assert obs.findings == [] and "nvidia-smi" not in obs.probe_errors
