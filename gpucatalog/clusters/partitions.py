"""MIG-style partition profiles per GPU product (``data/partitions.yaml``) as frozen dataclasses.

Used by the sim DRA publisher (:mod:`.sim.dra`: the partitionable devices of a GPU) and by the
static DRA checks (a claim naming a profile that no GPU of the bundle offers). A product without
an entry offers no partitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml


@dataclass(frozen=True)
class Profile:
    name: str  # e.g. "1g.10gb"
    compute: int  # compute slices drawn from the GPU's counter set
    memory: int  # memory slices drawn
    placements: int  # how many fit on one GPU


@dataclass(frozen=True)
class Catalogue:
    compute_slices: int
    memory_slices: int
    products: dict[str, tuple[Profile, ...]]

    def profiles(self, product: str) -> tuple[Profile, ...]:
        return self.products.get(product, ())

    def all_names(self) -> set[str]:
        return {p.name for ps in self.products.values() for p in ps}


@cache
def catalogue() -> Catalogue:
    text = resources.files("gpucatalog.clusters").joinpath("data/partitions.yaml").read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    products = {
        product: tuple(Profile(name=n, compute=int(p["compute"]), memory=int(p["memory"]),
                               placements=int(p["placements"])) for n, p in profs.items())
        for product, profs in doc["products"].items()
    }
    return Catalogue(compute_slices=int(doc["slices"]["compute"]), memory_slices=int(doc["slices"]["memory"]),
                     products=products)
