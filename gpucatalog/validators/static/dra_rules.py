"""Static checks of Dynamic Resource Allocation claims in a bundle (``resource.k8s.io``
ResourceClaims and ResourceClaimTemplates): what kube-scheduler would leave pending for ever, or
the API server refuse, found before anything is installed.

Called by ``catalog validate`` (through ``bundle_checks``) on all rendered objects of a bundle at
once, since the DeviceClasses come from the driver's component and the claims from another.
``check(objs, profiles)`` returns findings naming the object and the field:

- ``dra-unknown-deviceclass``: a request's ``deviceClassName`` names no DeviceClass of the bundle.
- ``dra-capacity-units``: a capacity request is not a Kubernetes quantity (``40GB``), or asks for
  ``memory`` without a unit (a bare number is bytes: ``40`` is 40 bytes, not 40 GiB).
- ``dra-unknown-profile``: a selector asks for a partition ``profile`` that no GPU of the target
  shape offers (``profiles``: the profile names the shape's GPU offers).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpucatalog.core import errors

GROUP = "resource.k8s.io"
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?\d+)?$")
UNIT = re.compile(r"(Ki|Mi|Gi|Ti|Pi|Ei|[kMGTPE])$")
PROFILE = re.compile(r"""\.profile\s*==\s*["']([^"']+)["']""")


def _requests(obj: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """(field path, exact request) of each request and first-available subrequest of a claim."""
    spec = obj.get("spec") or {}
    prefix = "spec"
    if obj.get("kind") == "ResourceClaimTemplate":
        spec, prefix = spec.get("spec") or {}, "spec.spec"
    for i, r in enumerate((spec.get("devices") or {}).get("requests") or []):
        if r.get("exactly") is not None:
            yield f"{prefix}.devices.requests[{i}].exactly", r["exactly"]
        for j, sub in enumerate(r.get("firstAvailable") or []):
            yield f"{prefix}.devices.requests[{i}].firstAvailable[{j}]", sub


def ref(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')}/{ns}{meta.get('name', '')}"


def check(objs: Iterable[Mapping[str, Any]], profiles: set[str], component: str = "") -> list[errors.Finding]:
    objs = list(objs)
    dra = [o for o in objs if str(o.get("apiVersion", "")).startswith(GROUP + "/")]
    classes = {str((o.get("metadata") or {}).get("name")) for o in dra if o.get("kind") == "DeviceClass"}
    out: list[errors.Finding] = []

    def finding(rule: str, obj: Mapping[str, Any], field: str, message: str) -> None:
        out.append(errors.Finding(rule=rule, message=message, component=component, obj=ref(obj), field=field))

    for o in dra:
        if o.get("kind") not in ("ResourceClaim", "ResourceClaimTemplate"):
            continue
        for path, req in _requests(o):
            cls = str(req.get("deviceClassName") or "")
            if cls not in classes:
                finding("dra-unknown-deviceclass", o, f"{path}.deviceClassName",
                        f"DeviceClass {cls!r} is not in the bundle (it has: {', '.join(sorted(classes)) or 'none'})")
            for name, value in ((req.get("capacity") or {}).get("requests") or {}).items():
                text = str(value)
                field = f"{path}.capacity.requests.{name}"
                if not QUANTITY.match(text):
                    finding("dra-capacity-units", o, field,
                            f"{text!r} is not a Kubernetes quantity (e.g. 40Gi, 40G, 40960Mi)")
                elif name == "memory" and not UNIT.search(text):
                    finding("dra-capacity-units", o, field,
                            f"{text!r} has no unit, so it means bytes; write e.g. {text}Gi")
            for k, sel in enumerate(req.get("selectors") or []):
                expr = str((sel.get("cel") or {}).get("expression") or "")
                for asked in PROFILE.findall(expr):
                    if asked not in profiles:
                        finding("dra-unknown-profile", o, f"{path}.selectors[{k}].cel.expression",
                                f"partition profile {asked!r} is not offered by the target's GPUs "
                                f"(offered: {', '.join(sorted(profiles)) or 'none'})")
    return out
