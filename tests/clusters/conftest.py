"""Sim-cluster fixtures (the root conftest may also list the plugin in pytest_plugins)."""

from gpucatalog.validators.clusters.sim.pytest_plugin import (  # noqa: F401
    k8s_client,
    sim_cluster,
    sim_kubeconfig,
    sim_namespace,
)
