"""``gpu_sharing_dra`` case ``bad_claims_named``: claims a user gets wrong fail clearly, naming the
field: a DeviceClass that does not exist (the scheduler's reason names the class), a capacity in
wrong units (the API server refuses the claim naming the capacity field), a partition profile no
GPU offers (never allocated).

Called by :mod:`.gpu_sharing_dra`; talks only to the Kubernetes API.
"""

from __future__ import annotations

from gpucatalog.validators.conformance.dra import workspace as dra_workspace
from gpucatalog.validators.conformance.kit import base, kube_client

MISSING_CLASS = "no-such-class.nvidia.com"
BAD_MEMORY = "40GB"  # not a Kubernetes quantity (40G or 40Gi are)
ABSENT_PROFILE = "9g.999gb"
FIELD = "spec.devices.requests[0].exactly.capacity.requests.memory"


def case(ctx: base.SuiteContext, res: base.CaseResult) -> None:
    kube = kube_client.Kube(ctx.kubeconfig)
    with dra_workspace.space(kube, ctx, "gpu_sharing_dra") as sp:
        sp.claim("no-class", {"deviceClassName": MISSING_CLASS})
        sp.pod("no-class", claim="no-class")
        reason = sp.stays_pending("no-class", 0.4)
        if MISSING_CLASS not in reason:
            raise base.CaseFailed(f"claim naming missing DeviceClass {MISSING_CLASS}: the reason does not name it: {reason!r}")
        res.details["missing_device_class"] = reason
        try:
            sp.claim("bad-units", dra_workspace.shared_request(BAD_MEMORY))
        except base.CaseFailed as exc:
            refusal = str(exc)
        else:
            raise base.CaseFailed(f"claim with capacity memory {BAD_MEMORY!r} was accepted by the API server")
        # kube-apiserver 1.36 refuses it while decoding (HTTP 400, "quantities must match …"),
        # before validation could name the field; the case names it
        if not ("HTTP 400" in refusal or "HTTP 422" in refusal) or "quantit" not in refusal:
            raise base.CaseFailed(f"claim with capacity memory {BAD_MEMORY!r} refused for another reason: {refusal}")
        res.details["wrong_units"] = f"{FIELD}: {BAD_MEMORY!r} is not a quantity; API server: {refusal[-200:]}"
        sp.claim("no-profile", dra_workspace.partition_request(ABSENT_PROFILE))
        sp.pod("no-profile", claim="no-profile")
        res.details["absent_profile"] = sp.stays_pending("no-profile", 0.4)
