"""The promotion gate: append ``bundle@version`` to a channel only with signed, trusted evidence
that exactly its current rendering passed everything the channel's policy requires.

Called by ``catalog promote``. The repository is the trust root: the policy and the trust file
are the ones in the catalog folder promoted into (``channels/policy.yaml``, ``trust.yaml``,
reviewed like code); other files may be named only for a dry run, which writes nothing. Every
entry records the sha256 of the policy and trust files that admitted it.

Each evidence file is judged by :mod:`.judge`, the one place that decides what evidence proves.
Checks, all of them, before refusing with every unmet requirement (CheckFailed, exit 1, channel
file untouched):

- each evidence envelope is signed by a key the trust file allows for this channel;
- its subject is this ``bundle@version`` (no replay of another bundle's evidence) and its digest
  equals a fresh render for the evidence's profile (no edits after certification);
- every profile the policy requires has evidence, and in it every required suite passed on this
  version with every case run (a suite with a case not run is incomplete, never passed; a suite
  that ran on the old version after a rollback proves nothing here), and no suite failed;
- binaries a user supplied (image map) are allowed, forbidden or required as the policy says
  (``userSuppliedBinaries``), and the entry lists them;
- no evidence is exploratory (run outside a component's declared Kubernetes range), and every
  Kubernetes minor the policy requires (``requiredKubernetes``) has passing evidence of a
  required profile;
- the version is in the policy's source channel with the same digests (stable only takes what
  went through candidate) and not already in the target channel.

The evidence envelopes of an entry are kept beside the channels (``channels.store_evidence``)
so ``install`` can check them later against the same trust file.

The fresh render is passed in as ``fresh_digest(profile) -> "sha256:<hex>"`` so this module needs
no catalog and unit tests need no Helm.
"""

from __future__ import annotations

import datetime as dt
import getpass
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucatalog.catalog import versions
from gpucatalog.core import errors
from gpucatalog.pipelines import channels, judge, policy, trust

POLICY = Path("channels") / "policy.yaml"
TRUST = Path("trust.yaml")


Checked = judge.Verdict  # one evidence file that passed every check

@dataclass(frozen=True)
class TrustRoot:
    """The policy and trust file a promotion is judged by."""

    policy: policy.Policy
    trust: trust.TrustFile


def default_promoter() -> str:
    """Who promotes: $CATALOG_PROMOTED_BY (CI sets it to the actor and run) or user@host."""
    return os.environ.get("CATALOG_PROMOTED_BY") or f"{getpass.getuser()}@{socket.gethostname()}"


def _in_catalog(catalog_dir: Path, rel: Path) -> Path:
    """``catalog_dir/rel``, refused if it (through a symlink) lives outside the catalog folder."""
    path = catalog_dir / rel
    real, root = path.resolve(), catalog_dir.resolve()
    if root not in real.parents:
        raise errors.InputError(f"resolves to {real}, outside the catalog folder {root}; the policy and the "
                                "trust file must be the repository's own", path=str(path))
    return path


def repository_root(catalog_dir: Path) -> TrustRoot:
    """The catalog folder's own policy and trust file: the only ones a promotion may write by."""
    return TrustRoot(policy.load(_in_catalog(catalog_dir, POLICY)), trust.load(_in_catalog(catalog_dir, TRUST)))


def check_evidence(
    path: Path,
    *,
    bundle: str,
    version: str,
    channel: str,
    trusted: trust.TrustFile,
    fresh_digest: Callable[[str], str],
    required_suites: list[str],
    user_supplied: str = "allow",
) -> tuple[Checked | None, list[errors.Finding]]:
    """Judge one evidence file for ``channel``; returns it (when it proves the claim) and the
    findings against it."""
    v = judge.judge(path, judge.Claim(
        bundle, version, trusted.for_channel(channel), fresh_digest, suites=tuple(required_suites),
        user_supplied=user_supplied, signer_name=trusted.name_of,
        trusted_from=f"{trusted.path}, channel {channel}"))
    return (v if v.ok else None), v.reasons


kubernetes_of = judge.kubernetes_of
minor_of = judge.minor_of


def promote(
    bundle: str,
    version: str,
    channel: str,
    evidence_paths: Sequence[Path],
    fresh_digest: Callable[[str], str],
    *,
    catalog_dir: Path,
    bundle_suites: tuple[str, ...] = (),
    promoted_by: str | None = None,
    dry_run: bool = False,
    policy_file: policy.Policy | None = None,
    trust_file: trust.TrustFile | None = None,
) -> dict[str, Any]:
    """Promote or raise: CheckFailed (exit 1) listing every unmet requirement; InputError (exit 2)
    for an unknown channel, unreadable evidence, a damaged channel file, or a policy or trust
    file from outside the catalog without ``dry_run``. Returns the entry (written unless
    ``dry_run``)."""
    if (policy_file is not None or trust_file is not None) and not dry_run:
        raise errors.InputError(
            "a promotion is judged only by the catalog's own channels/policy.yaml and trust.yaml; "
            "another policy or trust file may be named only for a dry run", field="--policy/--trust-file",
            expected="--dry-run, or no --policy/--trust-file")
    channels_dir = catalog_dir / "channels"
    if policy_file is None or trust_file is None:
        own = repository_root(catalog_dir)
        policy_file, trust_file = policy_file or own.policy, trust_file or own.trust
    pol = policy_file.channel(channel)
    # Load both channel files first: a damaged one is bad input (exit 2), reported before anything.
    channels.load(channels_dir, channel)
    if pol.source_channel:
        channels.load(channels_dir, pol.source_channel)
    if not evidence_paths:
        raise errors.InputError("no evidence given", field="--evidence", expected="at least one evidence file or folder")

    findings: list[errors.Finding] = []
    if not trust_file.for_channel(channel):
        findings.append(errors.Finding("trust", f"the trust file {trust_file.path} allows no key to sign for {channel!r}",
                                       obj=f"{bundle}@{version}"))
    required = pol.suites_for(bundle, bundle_suites)
    by_profile: dict[str, Checked] = {}
    upgrades: list[Checked] = []
    by_minor: dict[str, Checked] = {}  # required minor -> passing evidence of a required profile
    for p in evidence_paths:
        ok, f = check_evidence(p, bundle=bundle, version=version, channel=channel, trusted=trust_file,
                               fresh_digest=fresh_digest, required_suites=required,
                               user_supplied=pol.user_supplied_binaries)
        findings += f
        if ok is not None:
            by_profile.setdefault(ok.profile, ok)
            if ok.upgrade_from is not None:
                upgrades.append(ok)
            if ok.profile in pol.required_profiles and minor_of(ok.kubernetes) in pol.required_kubernetes:
                by_minor.setdefault(minor_of(ok.kubernetes), ok)
    for prof in pol.required_profiles:
        if prof not in by_profile:
            findings.append(errors.Finding("required-profile", f"no passing evidence for required profile {prof!r}",
                                           obj=f"{bundle}@{version}"))
    for minor in pol.required_kubernetes:
        if minor not in by_minor:
            findings.append(errors.Finding(
                "required-kubernetes", f"no passing evidence on Kubernetes {minor} (the policy requires "
                f"{', '.join(pol.required_kubernetes)}; `catalog matrix` certifies each)", obj=f"{bundle}@{version}"))
    ref = f"{bundle}@{version}"
    ordered = [by_profile[p] for p in pol.required_profiles if p in by_profile] + [
        c for p, c in sorted(by_profile.items()) if p not in pol.required_profiles]
    ordered += [c for m, c in sorted(by_minor.items()) if all(c is not o for o in ordered)]

    def make_entry(target: channels.Channel) -> dict[str, Any]:
        # Runs under the channel lock, so these reads see every promotion that finished before us.
        late = list(findings)
        if target.find(bundle, version) is not None:
            late.append(errors.Finding("channel", f"{ref} is already in {channel!r}", obj=str(target.path)))
        if pol.source_channel:
            src = channels.load(channels_dir, pol.source_channel)
            entry = src.find(bundle, version)
            if entry is None:
                late.append(errors.Finding("source-channel", f"{ref} is not in {pol.source_channel!r}; "
                                           f"{channel!r} only accepts what was promoted there first", obj=str(src.path)))
            else:
                for item in entry.get("evidence", []):
                    prof = item["profile"]
                    if prof in by_profile and by_profile[prof].digest != item["digest"]:
                        late.append(errors.Finding(
                            "source-channel", f"{ref} was promoted to {pol.source_channel!r} with digest "
                            f"{item['digest']} for profile {prof!r}, not {by_profile[prof].digest}", obj=str(src.path)))
        upgraded = _upgrade_requirement(channels_dir, pol, bundle, version, upgrades, late)
        if late:
            raise errors.CheckFailed(f"{ref} cannot be promoted to {channel!r}: {len(late)} unmet requirement(s)", late)
        first = ordered[0]
        return {
            **({"upgradeFrom": upgraded} if upgraded else {}),
            "bundle": bundle,
            "version": version,
            "digest": first.digest,
            "promotedAt": dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "promotedBy": promoted_by or default_promoter(),
            "evidenceDigest": first.evidence_digest,
            "policyDigest": policy_file.digest,
            "trustDigest": trust_file.digest,
            "evidence": [{"profile": c.profile, "digest": c.digest, "evidenceDigest": c.evidence_digest,
                          "signer": c.signer, **({"kubernetes": c.kubernetes} if c.kubernetes else {}),
                          **({"userSupplied": c.user_supplied} if c.user_supplied else {})}
                         for c in ordered],
        }

    if dry_run:
        return make_entry(channels.load(channels_dir, channel))
    extra = [c.envelope for c in upgrades if c not in ordered]
    return channels.append(channels_dir, channel, make_entry, [c.envelope for c in ordered] + extra)


def _upgrade_requirement(channels_dir: Path, pol: policy.ChannelPolicy, bundle: str, version: str,
                         upgrades: list[Checked], late: list[errors.Finding]) -> dict[str, Any] | None:
    """``requireUpgradeFrom: C``: one passing evidence must certify the upgrade from the version
    newest in C now (its digest as C recorded it for the evidence's profile). None when C holds
    no earlier version of the bundle (a first release has nothing to upgrade from)."""
    req = pol.require_upgrade_from
    if req is None:
        return None
    held = channels.load(channels_dir, req)
    earlier = [v for v in versions.sort_versions(held.versions(bundle))
               if v != version and versions.sort_versions([v, version])[-1] == version]
    if not earlier:
        return None
    base = earlier[-1]
    entry = held.find(bundle, base) or {}
    digests = {i["profile"]: i["digest"] for i in entry.get("evidence", [])}
    for c in upgrades:
        up = c.upgrade_from or {}
        if up.get("bundle") == bundle and up.get("version") == base and up.get("digest") == digests.get(c.profile):
            return {"channel": req, "version": base, "digest": str(up["digest"]), "evidenceDigest": c.evidence_digest}
    seen = ", ".join(f"{(c.upgrade_from or {}).get('version')} ({c.path})" for c in upgrades) or "none"
    late.append(errors.Finding(
        "upgrade-from", f"{bundle}@{version} needs evidence of a certified upgrade from {bundle}@{base} (newest in "
        f"{req!r}, digest {', '.join(sorted(set(digests.values())))}); upgrade evidence given: {seen}. Run: catalog certify "
        f"{bundle}@{version} --upgrade-from {req}", obj=str(held.path)))
    return None
