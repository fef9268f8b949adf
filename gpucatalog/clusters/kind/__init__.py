"""The ``kind`` cluster provider: Kubernetes nodes as Docker containers, with fake GPUs.

``cluster`` is the provider (``providers.get("kind", name)``), ``config`` writes the multi-node
kind configuration from a node shape, ``gpus`` gives the GPU workers their ``nvidia.com/gpu``
capacity (run-ai's fake-gpu-operator when its pinned chart is in the offline chart cache,
otherwise a node-status patch). Needs a running Docker engine; see docs/kind.md.
"""
