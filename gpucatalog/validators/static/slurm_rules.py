"""Static checks of the rendered ``slurm`` bundle: the GPU settings Slinky users trip on.

Input is the list of Kubernetes objects rendered from the ``slurm`` chart (and, for the CRD
and operator rules, the ``slurm-operator`` chart). Rules, each reported as a
:class:`~gpucatalog.core.errors.Finding` (rule, component, object, field):

- ``slurm.gres-types``: the Controller's slurm.conf has ``GresTypes`` listing ``gpu``.
- ``slurm.nodeset-gres``: every NodeSet has ``Gres=gpu:<type>:N`` with N equal to its node
  shape's GPU count, and a known node shape.
- ``slurm.nodeset-gpu-limit``: the slurmd container's ``nvidia.com/gpu`` limit equals N.
- ``slurm.partition-nodeset``: every ``PartitionName=… Nodes=`` names existing NodeSets.
- ``slurm.preemption``: partitions with different priority tiers come with
  ``PreemptType=preempt/partition_prio`` and a ``PreemptMode`` containing ``REQUEUE``.
- ``slurm.version``: the Slurm version (annotation and every image tag) is one the catalog
  supports; ``slurm.operator-version``: the operator image is on the supported Slinky line.
- ``slurm.crd-schema``: each Slinky CR validates against the CRD schema shipped in the
  operator chart.

Node shapes are a parameter (``{"h100-80gb-x8": 8, …}``); the shape catalogue lives elsewhere.
Called by the static validation step of ``catalog validate`` / ``certify``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jsonschema

from gpucatalog.core.errors import Finding

SLINKY = "slinky.slurm.net"
SUPPORTED_SLURM = ("25.11", "26.05")  # what Slinky 1.2.x runs (minimum-slurm-version 25.11)
SUPPORTED_OPERATOR = re.compile(r"^v?1\.2\.\d+$")
SHAPE_ANNOTATION = "gpucatalog.io/node-shape"
VERSION_ANNOTATION = "gpucatalog.io/slurm-version"
GRES_RE = re.compile(r"^gpu:(?P<type>[A-Za-z0-9_.-]+):(?P<count>\d+)$")
_TAG_RE = re.compile(r":(?P<ver>\d{2}\.\d{2})(?:\.\d+)?-[^:@/]+$")


def _kv(line: str) -> dict[str, str]:
    return dict(tok.split("=", 1) for tok in line.split() if "=" in tok)


def _slinky(objs: Iterable[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [o for o in objs if str(o.get("apiVersion", "")).startswith(SLINKY + "/") and o.get("kind") == kind]


def _name(obj: Mapping[str, Any]) -> str:
    return f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name', '?')}"


def check(
    objects: Sequence[Mapping[str, Any]],
    shape_gpus: Mapping[str, int],
    *,
    component: str = "slurm",
    supported_versions: Sequence[str] = SUPPORTED_SLURM,
) -> list[Finding]:
    """All findings for the rendered ``slurm`` chart; an empty list means it passed."""
    findings: list[Finding] = []

    def add(rule: str, obj: str, field: str, message: str) -> None:
        findings.append(Finding(rule=rule, message=message, component=component, obj=obj, field=field))

    controllers = _slinky(objects, "Controller")
    nodesets = _slinky(objects, "NodeSet")
    if len(controllers) != 1:
        add("slurm.controller", "", "", f"expected exactly one Slinky Controller, found {len(controllers)}")
    conf: dict[str, str] = {}
    partitions: list[dict[str, str]] = []
    for ctrl in controllers:
        for line in str((ctrl.get("spec") or {}).get("extraConf", "")).splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            kv = _kv(line)
            if "PartitionName" in kv:
                partitions.append(kv)
            elif "=" in line:
                key, value = line.split("=", 1)
                conf[key.strip()] = value.strip()
    cname = _name(controllers[0]) if controllers else ""
    if "gpu" not in conf.get("GresTypes", "").split(","):
        add("slurm.gres-types", cname, "spec.extraConf", "GresTypes=gpu is missing (Slinky 1.2 no longer sets it; GPU gres is ignored without it)")

    nodeset_names = {str(ns["metadata"]["name"]) for ns in nodesets}
    for ns in nodesets:
        findings += _check_nodeset(ns, shape_gpus, component)

    tiers: set[int] = set()
    for p in partitions:
        pname = f"partition/{p['PartitionName']}"
        for node in (n for n in p.get("Nodes", "").split(",") if n):
            if node != "ALL" and node not in nodeset_names:
                add("slurm.partition-nodeset", pname, "Nodes", f"names NodeSet {node!r}, which the bundle does not define (have: {', '.join(sorted(nodeset_names)) or 'none'})")
        try:
            tiers.add(int(p.get("PriorityTier", "1")))
        except ValueError:
            add("slurm.partition-nodeset", pname, "PriorityTier", f"PriorityTier {p.get('PriorityTier')!r} is not a number")
    if len(tiers) > 1:
        if conf.get("PreemptType") != "preempt/partition_prio":
            add("slurm.preemption", cname, "spec.extraConf", "partitions have different PriorityTier but PreemptType is not preempt/partition_prio")
        if "REQUEUE" not in conf.get("PreemptMode", "").upper().split(","):
            add("slurm.preemption", cname, "spec.extraConf", "PreemptMode must include REQUEUE so preempted jobs are requeued, not cancelled")

    findings += _check_versions(objects, supported_versions, component)
    return findings


def _check_nodeset(ns: Mapping[str, Any], shape_gpus: Mapping[str, int], component: str) -> list[Finding]:
    out: list[Finding] = []
    obj = _name(ns)
    spec = ns.get("spec") or {}
    shape = str(((ns.get("metadata") or {}).get("annotations") or {}).get(SHAPE_ANNOTATION, ""))
    expected = shape_gpus.get(shape)
    if expected is None:
        out.append(Finding("slurm.nodeset-gres", f"node shape {shape or '(none)'!r} is not in the shape catalogue", component, obj, f"metadata.annotations.{SHAPE_ANNOTATION}"))
    gres = _kv(str(spec.get("extraConf", ""))).get("Gres", "")
    m = GRES_RE.match(gres)
    count: int | None = None
    if not m:
        out.append(Finding("slurm.nodeset-gres", f"Gres {gres or '(missing)'!r} is not gpu:<type>:<count>", component, obj, "spec.extraConf"))
    else:
        count = int(m.group("count"))
        if expected is not None and count != expected:
            out.append(Finding("slurm.nodeset-gres", f"Gres gpu count {count} differs from node shape {shape}'s {expected} GPUs", component, obj, "spec.extraConf"))
    limit = (((spec.get("slurmd") or {}).get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
    want = expected if expected is not None else count
    if limit is None:
        out.append(Finding("slurm.nodeset-gpu-limit", "slurmd has no nvidia.com/gpu limit: the pod gets no GPUs from the device plugin", component, obj, "spec.slurmd.resources.limits"))
    elif want is not None and str(limit) != str(want):
        out.append(Finding("slurm.nodeset-gpu-limit", f"nvidia.com/gpu limit {limit} differs from {want} GPUs", component, obj, "spec.slurmd.resources.limits"))
    return out


def _images(obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    spec = obj.get("spec") or {}
    out = []
    for key in ("slurmctld", "slurmd", "slurmrestd", "slurmdbd", "login"):
        img = (spec.get(key) or {}).get("image")
        if img:
            out.append((f"spec.{key}.image", str(img)))
    return out


def _check_versions(objects: Sequence[Mapping[str, Any]], supported: Sequence[str], component: str) -> list[Finding]:
    out: list[Finding] = []
    for obj in objects:
        if not str(obj.get("apiVersion", "")).startswith(SLINKY + "/"):
            continue
        ann = ((obj.get("metadata") or {}).get("annotations") or {}).get(VERSION_ANNOTATION)
        if ann is not None and str(ann) not in supported:
            out.append(Finding("slurm.version", f"Slurm {ann} is not supported (supported: {', '.join(supported)})", component, _name(obj), f"metadata.annotations.{VERSION_ANNOTATION}"))
        for field, image in _images(obj):
            m = _TAG_RE.search(image)
            if not m:
                out.append(Finding("slurm.version", f"image {image} has no <slurm>-<os> tag", component, _name(obj), field))
            elif m.group("ver") not in supported:
                out.append(Finding("slurm.version", f"image {image} runs Slurm {m.group('ver')}, not supported (supported: {', '.join(supported)})", component, _name(obj), field))
    return out


def check_operator(objects: Sequence[Mapping[str, Any]], *, component: str = "slurm-operator") -> list[Finding]:
    """The operator Deployment runs ghcr.io/slinkyproject/slurm-operator on the 1.2.x line."""
    out: list[Finding] = []
    found = False
    for obj in objects:
        if obj.get("kind") != "Deployment":
            continue
        for c in ((((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []):
            image = str(c.get("image", ""))
            if "/slurm-operator" not in image:
                continue
            found = True
            tag = image.split("@", 1)[0].rsplit(":", 1)[-1] if ":" in image.split("@", 1)[0].rsplit("/", 1)[-1] else ""
            if not SUPPORTED_OPERATOR.match(tag):
                out.append(Finding("slurm.operator-version", f"operator image {image} is not on the supported Slinky 1.2.x line", component, _name(obj), "spec.template.spec.containers.image"))
    if not found:
        out.append(Finding("slurm.operator-version", "no slurm-operator Deployment in the rendered chart", component, "", ""))
    return out


def check_crs(crds: Sequence[Mapping[str, Any]], objects: Sequence[Mapping[str, Any]], *, component: str = "slurm") -> list[Finding]:
    """Validate each Slinky CR against the served version's openAPIV3Schema of its CRD."""
    schemas: dict[tuple[str, str], Mapping[str, Any]] = {}
    for crd in crds:
        if crd.get("kind") != "CustomResourceDefinition":
            continue
        spec = crd.get("spec") or {}
        for ver in spec.get("versions") or []:
            schema = (ver.get("schema") or {}).get("openAPIV3Schema")
            if schema:
                schemas[(f"{spec['group']}/{ver['name']}", spec["names"]["kind"])] = schema
    out: list[Finding] = []
    for obj in objects:
        key = (str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if not key[0].startswith(SLINKY + "/"):
            continue
        schema = schemas.get(key)
        if schema is None:
            out.append(Finding("slurm.crd-schema", f"no CRD serves {key[0]} {key[1]}", component, _name(obj), "apiVersion"))
            continue
        for err in jsonschema.Draft7Validator(schema).iter_errors(obj):
            path = ".".join(str(p) for p in err.absolute_path)
            out.append(Finding("slurm.crd-schema", err.message, component, _name(obj), path))
    return out
