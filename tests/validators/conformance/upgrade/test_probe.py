"""The probe loop on a fake probe kind: the gap is the longest wait of a probe waiting during the
window, a probe never scheduled counts as the give-up time, and a prober runs again after a stop
(an upgrade then a rollback)."""

from __future__ import annotations

import time

from gpucatalog.validators.conformance.upgrade import probe as upgrade_probe


class Timed(upgrade_probe.Prober):
    """Probe i is scheduled ``delays[i]`` seconds after submission (never when absent)."""

    def __init__(self, delays: dict[int, float]) -> None:
        super().__init__(give_up_s=1.0)
        self.delays, self.submitted, self.removed = delays, {}, []  # type: ignore[var-annotated]

    def submit(self, i: int) -> None:
        self.submitted[i] = time.monotonic()

    def scheduled(self, i: int) -> bool:
        return i in self.delays and time.monotonic() - self.submitted[i] >= self.delays[i]

    def remove(self, i: int) -> None:
        self.removed.append(i)


def test_gap_is_the_longest_wait_in_the_window() -> None:
    p = Timed({})
    p.probes = [upgrade_probe.Probe(0.0, 0.5), upgrade_probe.Probe(1.0, 4.0), upgrade_probe.Probe(6.0, 0.3),
                upgrade_probe.Probe(20.0, 9.0)]
    assert p.gap((2.0, 7.0)) == (4.0, 2, 0)  # the probe started at 1.0 was still waiting at 2.0
    p.probes.append(upgrade_probe.Probe(8.0, None))
    assert p.gap((7.5, 8.5)) == (1.0, 1, 1)  # never scheduled: counted at the give-up time


def test_baseline_and_a_second_run_after_stop() -> None:
    p = Timed({i: 0.05 for i in range(2000)})
    assert 0.04 <= p.baseline(count=3) < 0.5
    for _ in range(2):  # upgrade, then rollback
        n = len(p.probes)
        p.start()
        time.sleep(0.3)
        p.stop()
        assert len(p.probes) > n and all(x.waited is not None for x in p.probes[n:])
    assert set(p.removed) >= {1000, 1001, 1002, 1} and len(p.removed) == len(set(p.removed))
