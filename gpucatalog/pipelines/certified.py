"""What ``catalog install`` checks before it installs from a channel: that the bundle it is about
to apply is exactly what was certified and promoted.

Called by ``catalog install``. For ``bundle@version`` in ``channel`` and the requested profile:

- the channel has an entry for it, and the entry certified this profile;
- a fresh render's digest equals the digest the entry recorded for that profile (a template,
  value or chart changed after promotion changes the digest);
- the entry's evidence (kept beside the channels by ``promote``) is the file its digest names,
  is signed by a key the repository's trust file allows for this channel, and says what the
  entry says (subject, digest, profile, every suite passed with every case run).

Anything else is a CheckFailed (exit 1) naming each difference; nothing is installed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucatalog.core import errors, yamlfile
from gpucatalog.pipelines import channels, evidence, promote


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


def _evidence_findings(catalog_dir: Path, channel: str, ref: str, item: dict[str, Any]) -> tuple[str, list[errors.Finding]]:
    """(signer name, findings) for the stored evidence of one entry item."""
    path = channels.stored_evidence(catalog_dir / "channels", item["evidenceDigest"])
    where = str(path)
    try:
        data = yamlfile.read_bytes(path, evidence.MAX_ENVELOPE_BYTES, what="stored evidence")
    except errors.InputError as exc:
        return "", [errors.Finding("evidence", f"the entry's evidence cannot be read: {exc}", obj=where)]
    if "sha256:" + hashlib.sha256(data).hexdigest() != item["evidenceDigest"]:
        return "", [errors.Finding("evidence", f"stored evidence does not match the entry's digest {item['evidenceDigest']}",
                                   obj=where)]
    env, _digest, _data = evidence.read(path)
    trusted = promote.repository_root(catalog_dir).trust
    try:
        statement, signer = evidence.verify_signed(env, trusted.for_channel(channel))
    except errors.CheckFailed as exc:
        return "", [errors.Finding(f.rule, f"{f.message} (checked against {trusted.path})", obj=where)
                    for f in exc.findings] or [errors.Finding("signature", exc.summary, obj=where)]
    pred, subject = statement["predicate"], statement["subject"][0]
    findings = []
    if subject.get("name") != ref or "sha256:" + str(subject["digest"].get("sha256")) != item["digest"]:
        findings.append(errors.Finding("evidence", f"evidence is for {subject.get('name')} "
                                       f"sha256:{subject['digest'].get('sha256')}, the entry says {ref} {item['digest']}",
                                       obj=where))
    if pred.get("profile") != item["profile"]:
        findings.append(errors.Finding("evidence", f"evidence is for profile {pred.get('profile')!r}, "
                                       f"the entry says {item['profile']!r}", obj=where))
    findings += promote.suite_findings(where, pred, [])
    return trusted.name_of(signer), findings


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
    signer, more = _evidence_findings(catalog_dir, channel, ref, item)
    findings += more
    if findings:
        raise errors.CheckFailed(f"{ref} ({profile}) is not what channel {channel!r} certified; nothing installed",
                                 findings)
    return Certificate(channel, ref, profile, item["digest"], item["evidenceDigest"], signer)
