"""Which channels hold which bundle versions, and whether each still stands today.

Called by ``catalog list --channels`` and ``catalog show``. For every entry of every channel file
(``catalog/channels/*.yaml`` but ``policy.yaml``) and every profile it certified: when and by whom
it was promoted, which Kubernetes release and signer its evidence names, whether that stored
evidence still verifies (the judge, through ``certified.judge_entry``: the file its digest names,
signed by a key the trust file allows for the channel), and whether a fresh render of the bundle
for that profile still has the certified digest. Read-only: nothing is written.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpucatalog.catalog import model, render
from gpucatalog.core import errors
from gpucatalog.pipelines import certified, channels

POLICY_FILE = "policy.yaml"


@dataclass(frozen=True)
class Certified:
    """One profile of one channel entry, checked today."""

    profile: str
    kubernetes: str  # the release the evidence ran on; "" in entries from before minors were recorded
    digest: str
    signer: str
    evidence_verifies: bool
    renders_same: bool | None  # None: could not render today (the reason is in ``problems``)
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.evidence_verifies and self.renders_same is True


@dataclass(frozen=True)
class Holding:
    channel: str
    bundle: str
    version: str
    promoted_at: str
    promoted_by: str
    profiles: tuple[Certified, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.profiles)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok, "profiles": [{**asdict(p), "ok": p.ok} for p in self.profiles]}


def channel_names(catalog_dir: Path) -> list[str]:
    folder = catalog_dir / "channels"
    return sorted(p.stem for p in folder.glob("*.yaml") if p.name != POLICY_FILE) if folder.is_dir() else []


def _fresh_digest(cat: model.Catalog, ref: str, profile: str, cache: dict[tuple[str, str], str]) -> str:
    if (ref, profile) not in cache:
        cache[(ref, profile)] = render.render_bundle(cat, ref, profile).digest
    return cache[(ref, profile)]


def _check(cat: model.Catalog, channel: str, entry: dict[str, Any], item: dict[str, Any],
           cache: dict[tuple[str, str], str]) -> Certified:
    bundle, version, profile = entry["bundle"], entry["version"], str(item["profile"])
    verdict = certified.judge_entry(cat.root, channel, bundle, version, item)
    problems = [r.message for r in verdict.reasons]
    same: bool | None = None
    if (bundle, version) not in cat.bundles:
        problems.append(f"{bundle}@{version} is not in this catalog: it cannot be rendered today")
    else:
        try:
            fresh = _fresh_digest(cat, f"{bundle}@{version}", profile, cache)
        except errors.CatalogError as exc:
            problems.append(f"cannot render today: {exc}")
        else:
            same = fresh == item["digest"]
            if not same:
                problems.append(f"renders today to {fresh}, certified {item['digest']}")
    return Certified(profile, str(item.get("kubernetes", "")), str(item["digest"]),
                     verdict.signer or str(item.get("signer", "")), verdict.ok, same, tuple(problems))


def holdings(cat: model.Catalog, bundle: str | None = None, version: str | None = None) -> list[Holding]:
    """Every channel entry (of ``bundle``, and ``version``, when given), checked today."""
    cache: dict[tuple[str, str], str] = {}
    out: list[Holding] = []
    for name in channel_names(cat.root):
        ch = channels.load(cat.root / "channels", name)
        for e in ch.entries:
            if bundle is not None and e["bundle"] != bundle or version is not None and e["version"] != version:
                continue
            out.append(Holding(name, e["bundle"], e["version"], str(e["promotedAt"]), str(e["promotedBy"]),
                               tuple(_check(cat, name, e, item, cache) for item in e["evidence"])))
    return sorted(out, key=lambda h: (h.bundle, h.version, h.channel))


def lines(held: list[Holding]) -> list[str]:
    """One line per channel entry and profile, for people."""
    out = []
    for h in held:
        for p in h.profiles:
            state = "verifies, renders the same" if p.ok else "DOES NOT VERIFY: " + "; ".join(p.problems)
            out.append(f"{h.bundle}@{h.version:10} {h.channel:10} {p.profile:8} "
                       f"{'Kubernetes ' + p.kubernetes if p.kubernetes else 'Kubernetes (not recorded)':22} "
                       f"promoted {h.promoted_at} by {h.promoted_by}, signed by {p.signer or '?'}: {state}")
    return out
