"""The ``gpu_sharing_dra`` conformance suite: fractional GPUs allocated by Dynamic Resource
Allocation, its workspace and per-device accounting."""
