"""Hostile-input tests: every attack of issue 14 kept as a regression test. They share the small
self-contained catalog of the catalog tests (one demo chart, two components, one bundle)."""

from tests.catalog.conftest import mini_catalog

__all__ = ["mini_catalog"]
