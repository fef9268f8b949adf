"""What ``catalog install`` checks before it installs from a channel: that the bundle it is about
to apply is exactly what was certified and promoted.

Called by ``catalog install``. For ``bundle@version`` in ``channel`` and the requested profile:

- the channel has an entry for it, and the entry certified this profile;
- a fresh render's digest equals the digest the entry recorded for that profile (a template,
  value or chart changed after promotion changes the digest);
- the entry's evidence (kept beside the channels by ``promote``) is the file its digest names,
  and the judge (:mod:`.judge`) finds it signed by a key the repository's trust file allows for
  this channel and saying what the entry says (subject, digest, profile, every suite passed on
  this version with every case run).

Anything else is a CheckFailed (exit 1) naming each difference; nothing is installed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucatalog.core import errors, yamlfile
from gpucatalog.pipelines import channels, evidence, judge, promote


@dataclass(frozen=True)
class Certificate:
    """The channel entry and evidence that vouch for one install."""

    channel: str
    ref: str
    profile: str
    digest: str
    evidence_digest: str
    signer: str

    def describe(self) -> str:
        return (f"gpu-catalog: {self.ref} certified in channel {self.channel} for profile {self.profile}: "
                f"digest {self.digest}, evidence {self.evidence_digest} signed by {self.signer}")


def judge_entry(catalog_dir: Path, channel: str, bundle: str, version: str, item: dict[str, Any],
                suites: tuple[str, ...] = ()) -> judge.Verdict:
    """The verdict on the stored evidence of one channel entry item: the file its digest names,
    signed by a key the repository's trust file allows for ``channel``, about the digest and
    profile the entry recorded, every suite passed (``suites`` required)."""
    path = channels.stored_evidence(catalog_dir / "channels", item["evidenceDigest"])
    try:
        data = yamlfile.read_bytes(path, evidence.MAX_ENVELOPE_BYTES, what="stored evidence")
    except errors.InputError as exc:
        out = judge.Verdict(str(path))
        out.add("evidence", f"the entry's evidence cannot be read: {exc}")
        return out
    if "sha256:" + hashlib.sha256(data).hexdigest() != item["evidenceDigest"]:
        out = judge.Verdict(str(path))
        out.add("evidence", f"stored evidence does not match the entry's digest {item['evidenceDigest']}")
        return out
    trusted = promote.repository_root(catalog_dir).trust
    return judge.judge(path, judge.Claim(
        bundle, version, trusted.for_channel(channel), lambda _p: str(item["digest"]), profile=str(item["profile"]),
        suites=suites, signer_name=trusted.name_of, trusted_from=f"{trusted.path}, channel {channel}"))


def verify(catalog_dir: Path, channel: str, bundle: str, version: str, profile: str, rendered_digest: str) -> Certificate:
    """The certificate for installing ``bundle@version`` (rendered for ``profile`` to
    ``rendered_digest``) from ``channel``, or CheckFailed naming every difference."""
    ref = f"{bundle}@{version}"
    ch = channels.load(catalog_dir / "channels", channel)
    entry = ch.find(bundle, version)
    if entry is None:
        raise errors.CheckFailed(f"{ref} is not in channel {channel!r}", [errors.Finding(
            "channel", f"promoted: {', '.join(ch.versions(bundle)) or 'none'}", obj=str(ch.path))])
    items: dict[str, Any] = {}
    for i in entry["evidence"]:
        items.setdefault(i["profile"], i)  # the first per profile; later ones are further Kubernetes minors
    item = items.get(profile)
    if item is None:
        raise errors.CheckFailed(
            f"{ref} in channel {channel!r} was never certified for profile {profile!r}",
            [errors.Finding("profile", f"certified profiles: {', '.join(items)}; certify and promote {profile!r} "
                            "first, or pass --allow-uncertified", obj=str(ch.path))])
    findings = []
    if item["digest"] != rendered_digest:
        findings.append(errors.Finding(
            "digest", f"{ref} now renders (profile {profile}) to {rendered_digest}, but {channel!r} certified "
            f"{item['digest']}: a chart, value or catalog file changed after promotion", obj=str(ch.path)))
    v = judge_entry(catalog_dir, channel, bundle, version, item)
    findings += v.reasons
    if findings:
        raise errors.CheckFailed(f"{ref} ({profile}) is not what channel {channel!r} certified; nothing installed",
                                 findings)
    return Certificate(channel, ref, profile, item["digest"], item["evidenceDigest"], v.signer)


def channel_digest(catalog_dir: Path, channel: str, bundle: str, version: str, profile: str) -> str:
    """The digest ``channel`` certified for ``bundle@version`` on ``profile``, once the judge
    finds the entry's stored evidence proves it; CheckFailed otherwise (``mirror`` copies only
    what this returns)."""
    ref = f"{bundle}@{version}"
    ch = channels.load(catalog_dir / "channels", channel)
    entry = ch.find(bundle, version)
    if entry is None:
        raise errors.CheckFailed(f"{ref} is not in channel {channel!r}: only certified bundles are mirrored", [
            errors.Finding("channel", f"promoted: {', '.join(ch.versions(bundle)) or 'none'}", obj=str(ch.path))])
    item = next((i for i in entry["evidence"] if i["profile"] == profile), None)
    if item is None:
        raise errors.CheckFailed(f"{ref} in channel {channel!r} was never certified for profile {profile!r}", [
            errors.Finding("profile", "certified profiles: " + ", ".join(i["profile"] for i in entry["evidence"]),
                           obj=str(ch.path))])
    v = judge_entry(catalog_dir, channel, bundle, version, item)
    if not v.ok:
        raise errors.CheckFailed(f"the evidence of {ref} in channel {channel!r} does not prove it", v.reasons)
    return str(item["digest"])
