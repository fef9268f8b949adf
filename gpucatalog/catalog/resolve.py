"""Resolve ``BUNDLE[@VERSION]`` against a loaded catalog into an ordered install plan.

Called by render, validate, show, certify and install. Order: the bundle's declared order,
adjusted so every component comes after what it ``dependsOn``; a cycle or an unknown
dependency, component or version is bad input.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucatalog.catalog import model
from gpucatalog.core import errors


@dataclass(frozen=True)
class Step:
    entry: model.BundleComponent
    version: model.ComponentVersion


@dataclass(frozen=True)
class Plan:
    bundle: model.Bundle
    profile: model.Profile
    steps: tuple[Step, ...]


def split_ref(ref: str) -> tuple[str, str | None]:
    name, _, version = ref.partition("@")
    if not name:
        raise errors.InputError(f"bad bundle reference {ref!r}", expected="NAME or NAME@VERSION")
    return name, version or None


def find_bundle(cat: model.Catalog, ref: str) -> model.Bundle:
    name, version = split_ref(ref)
    known = cat.bundle_versions(name)
    if not known:
        names = sorted({n for (n, _v) in cat.bundles})
        raise errors.NotFoundError(f"unknown bundle {name!r}", field="BUNDLE", expected=", ".join(names))
    if version is None:
        version = known[-1]
    if (name, version) not in cat.bundles:
        raise errors.NotFoundError(
            f"unknown version {version!r} of bundle {name!r}", field="BUNDLE", expected=", ".join(known)
        )
    return cat.bundles[(name, version)]


def order(bundle: model.Bundle) -> list[model.BundleComponent]:
    by_name = {c.name: c for c in bundle.components}
    for c in bundle.components:
        for dep in c.depends_on:
            if dep not in by_name:
                raise errors.NotFoundError(
                    f"component {c.name!r} depends on {dep!r}, which is not in the bundle",
                    path=str(bundle.source_file),
                    field="spec.components.dependsOn",
                )
    done: list[model.BundleComponent] = []
    state: dict[str, str] = {}

    def visit(c: model.BundleComponent, chain: list[str]) -> None:
        if state.get(c.name) == "done":
            return
        if state.get(c.name) == "visiting":
            cycle = " -> ".join([*chain[chain.index(c.name) :], c.name])
            raise errors.InputError(
                f"dependency cycle: {cycle}", path=str(bundle.source_file), field="spec.components.dependsOn"
            )
        state[c.name] = "visiting"
        for dep in c.depends_on:
            visit(by_name[dep], [*chain, c.name])
        state[c.name] = "done"
        done.append(c)

    for c in bundle.components:
        visit(c, [])
    return done


def plan(cat: model.Catalog, ref: str, profile: str) -> Plan:
    bundle = find_bundle(cat, ref)
    if profile not in bundle.profiles:
        raise errors.NotFoundError(
            f"bundle {bundle.ref} has no profile {profile!r}",
            field="--profile",
            expected=", ".join(sorted(bundle.profiles)),
        )
    prof = bundle.profiles[profile]
    for comp in prof.values.keys() | prof.kustomize.keys():
        if comp not in {c.name for c in bundle.components}:
            raise errors.NotFoundError(
                f"profile {profile!r} overlays {comp!r}, which is not in the bundle",
                path=str(bundle.source_file),
                field=f"spec.profiles.{profile}",
            )
    steps = []
    for entry in order(bundle):
        if entry.name not in cat.components:
            raise errors.NotFoundError(
                f"unknown component {entry.name!r}", path=str(bundle.source_file), field="spec.components.name"
            )
        cv = cat.versions.get((entry.name, entry.version))
        if cv is None:
            known = sorted(v for (n, v) in cat.versions if n == entry.name)
            raise errors.NotFoundError(
                f"unknown version {entry.version!r} of component {entry.name!r}",
                path=str(bundle.source_file),
                field="spec.components.version",
                expected=", ".join(known) or "a version under catalog/components/" + entry.name,
            )
        steps.append(Step(entry=entry, version=cv))
    return Plan(bundle=bundle, profile=prof, steps=tuple(steps))
