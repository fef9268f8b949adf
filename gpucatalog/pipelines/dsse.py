"""DSSE (Dead Simple Signing Envelope) v1: pre-authentication encoding, sign and verify.

Called by ``evidence`` to wrap in-toto statements. The signature covers
``PAE(payloadType, payload)`` — never the JSON of the envelope — so neither the type nor the
payload can be swapped without breaking it. Keys are Ed25519; ``keyid`` is ``keys.keyid``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ed25519

from gpucatalog.core import errors
from gpucatalog.pipelines import keys


def pae(payload_type: str, payload: bytes) -> bytes:
    """``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``, lengths as ASCII decimal byte counts."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def sign(payload: bytes, payload_type: str, key: ed25519.Ed25519PrivateKey) -> dict[str, Any]:
    sig = key.sign(pae(payload_type, payload))
    return {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": keys.keyid(key.public_key()), "sig": base64.b64encode(sig).decode()}],
    }


def _b64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"{what} is not valid base64") from exc


def verify(
    envelope: Mapping[str, Any],
    trusted: Mapping[str, ed25519.Ed25519PublicKey],
    payload_type: str,
) -> tuple[bytes, str]:
    """Return ``(payload, keyid)`` of the first signature made by a key in ``trusted``.

    Raises CheckFailed listing why each signature was rejected (untrusted key, bad signature).
    """
    findings: list[errors.Finding] = []
    try:
        if envelope.get("payloadType") != payload_type:
            raise ValueError(f"payloadType is {envelope.get('payloadType')!r}, expected {payload_type!r}")
        payload = _b64(envelope.get("payload"), "payload")
        sigs = envelope.get("signatures")
        if not isinstance(sigs, list) or not sigs:
            raise ValueError("envelope has no signatures")
    except ValueError as exc:
        raise errors.CheckFailed("malformed DSSE envelope", [errors.Finding("envelope", str(exc))]) from exc
    message = pae(payload_type, payload)
    for i, s in enumerate(sigs):
        kid = s.get("keyid", "") if isinstance(s, dict) else ""
        kid = kid if isinstance(kid, str) else ""  # a hint only; a list or a number is no hint
        try:
            raw = _b64(s.get("sig") if isinstance(s, dict) else None, f"signatures[{i}].sig")
        except ValueError as exc:
            findings.append(errors.Finding("signature", str(exc)))
            continue
        # keyid is only a hint: try the named key first, then every trusted key, so a missing or
        # wrong hint neither lets an untrusted key through nor rejects a good signature.
        candidates = [trusted[kid]] if kid in trusted else list(trusted.values())
        for pub in candidates:
            try:
                pub.verify(raw, message)
            except InvalidSignature:
                continue
            return payload, keys.keyid(pub)
        if kid in trusted:
            findings.append(errors.Finding("signature", f"bad signature from trusted key {kid[:16]}…"))
        else:
            findings.append(errors.Finding("trust", f"signed by untrusted key {kid[:16] or '(no keyid)'}…"))
    raise errors.CheckFailed("no valid signature by a trusted key", findings)
