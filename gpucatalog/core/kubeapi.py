"""Build a Kubernetes API client from a kubeconfig file.

The ``kubernetes`` package's loader is untyped, so its ``Any`` lives here once. Used by install's
readiness gates, certification, the cluster providers and the suites (``gpuhealth`` has its own:
it ships as a separate image and imports nothing of the catalog).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def client_for(kubeconfig: str | os.PathLike[str] | None, *, retries: int | None = None) -> Any:
    """An ``ApiClient`` for ``kubeconfig`` (``None``: $KUBECONFIG or ~/.kube/config).

    ``retries=0`` makes an unreachable server fail at once instead of after urllib3's retries.
    """
    # Imported here, not at module level: sim-only helpers import modules that use this one from
    # plain host Python processes that have no kubernetes package (e.g. the sim actuator hook).
    from kubernetes import config

    loader: Any = config.new_client_from_config  # untyped in the kubernetes package
    api = loader(config_file=str(Path(kubeconfig)) if kubeconfig is not None else None)
    if retries is not None:
        api.configuration.retries = retries
    return api


def plain_json(call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The API's answer to a client call (e.g. ``core.list_pod_for_all_namespaces``) as plain
    JSON, without the client's model objects: building those costs about a millisecond an
    object, a core-second a poll for a process that lists a few thousand pods."""
    resp = call(*args, _preload_content=False, **kwargs)
    try:
        found: dict[str, Any] = json.loads(resp.data)
    finally:
        resp.release_conn()
    return found
