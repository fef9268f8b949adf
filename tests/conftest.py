"""Root conftest: one sim cluster per test run, shared by every integration test."""

pytest_plugins = ["gpucatalog.validators.clusters.sim.pytest_plugin"]
