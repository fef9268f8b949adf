"""Benchmark: gpu-health's nvidia-smi checks over the real-dump corpus and its edited variants.

Reads the twelve real ``nvidia-smi -q -x`` dumps where they live (``../shared/data/nvidia-smi``
or ``$GPU_HEALTH_SMI_CORPUS``; never copied into the repository) and prints:

* false positives: findings on the real dumps under their platform's expectations, with no
  expectations at all, on the same machines busy on their platform link, on the same machines
  idle at gen 1, and on a link variant seen fewer times than the hysteresis asks;
* false negatives: edited variants (row remap pending/failure, volatile uncorrectable ECC, x4
  at P0, gen 1 at P0 over several readings) whose one expected finding and action is missing;
* for reference, what a naive check (current link against the GPU's own maximum, at any load)
  flags on the same twelve dumps.

    PYTHONPATH=$PWD python3 bench/gpuhealth_smi_corpus.py [--busy-readings 3]
"""

from __future__ import annotations

import argparse
import sys
import time

from gpucatalog.gpuhealth import parse_nvsmi, pcie
from gpucatalog.gpuhealth.findings import Expectations
from tests.gpuhealth import smi_corpus


def naive_flags(xml: str) -> bool:
    g = parse_nvsmi.parse(xml).gpus[0]
    gen = g.pcie_gen_max is not None and g.pcie_gen_current is not None and g.pcie_gen_current < g.pcie_gen_max
    width = (g.pcie_width_max is not None and g.pcie_width_current is not None
             and g.pcie_width_current < g.pcie_width_max)
    return gen or width


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--busy-readings", type=int, default=pcie.PcieRules().busy_readings)
    args = ap.parse_args()
    rules = pcie.PcieRules(busy_readings=args.busy_readings)
    dumps = smi_corpus.dumps()
    if not dumps:
        print(f"no dumps at {smi_corpus.corpus_dir()} (set {smi_corpus.ENV})", file=sys.stderr)
        return 2
    platforms = smi_corpus.platforms()
    t0 = time.perf_counter()
    many = rules.busy_readings + 2
    fp: dict[str, int] = {"real dump, platform expectations": 0, "real dump, no expectations": 0,
                          "busy on its platform link": 0, "idle at gen 1": 0, "link variant before hysteresis": 0}
    negatives: dict[str, int] = dict.fromkeys(fp, 0)
    fn = wrong = positives = 0
    naive = 0
    for dump in dumps:
        xml, expect = dump.read_text(), platforms[dump.name]
        naive += naive_flags(xml)
        cases = [("real dump, platform expectations", xml, expect), ("real dump, no expectations", xml, Expectations()),
                 ("busy on its platform link", smi_corpus.busy_healthy(xml, expect), expect),
                 ("idle at gen 1", smi_corpus.idle_downshifted(xml), expect)]
        for label, text, exp in cases:
            assert text is not None
            negatives[label] += 1
            fp[label] += bool(smi_corpus.judge(text, exp, rules, readings=many))
        for v in smi_corpus.variants(dump.name, xml, expect, rules):
            positives += 1
            found = [(f.family, f.reason, f.action) for f in smi_corpus.judge(v.xml, expect, rules, v.readings)]
            want = (v.family, v.reason, v.action)
            fn += want not in found
            wrong += any(f != want for f in found)
            if v.readings > 1:
                negatives["link variant before hysteresis"] += 1
                fp["link variant before hysteresis"] += bool(smi_corpus.judge(v.xml, expect, rules, v.readings - 1))
    elapsed = time.perf_counter() - t0
    print(f"corpus: {len(dumps)} real dumps at {smi_corpus.corpus_dir()}, all parsed; "
          f"hysteresis {rules.busy_readings} busy readings")
    print(f"{'negative case (must yield no finding)':<42} {'cases':>5} {'false positives':>16}")
    for label in fp:
        print(f"{label:<42} {negatives[label]:>5} {fp[label]:>16}")
    print(f"{'fault variants (must yield one finding)':<42} {positives:>5} {'missed (FN)':>16} {'extra/wrong':>12}")
    print(f"{'':<42} {'':>5} {fn:>16} {wrong:>12}")
    print(f"total: false positives {sum(fp.values())} of {sum(negatives.values())} negative cases, "
          f"false negatives {fn} of {positives} variants")
    print(f"reference: a naive check (current link vs the GPU's own maximum, any load) flags "
          f"{naive} of {len(dumps)} real dumps")
    print(f"time: {elapsed:.2f} s")
    return 0 if sum(fp.values()) == 0 and fn == 0 and wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
