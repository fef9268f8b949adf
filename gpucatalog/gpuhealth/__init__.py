"""gpu-health: the GPU node-health agent and the remediation controller.

Shipped as its own image (``Dockerfile.gpu-health``) through ``charts/gpu-health``; never imports
``gpucatalog.catalog``, ``gpucatalog.validators`` or ``gpucatalog.pipelines``. Layout:

* parsers (pure): :mod:`parse_kmsg`, :mod:`parse_nvsmi`, :mod:`parse_nvlink`, :mod:`parse_ib`
* policy and checks (pure): :mod:`xidpolicy`, :mod:`findings`, :mod:`checks`, :mod:`pcie`, :mod:`conditions`
* remediation decisions (pure): :mod:`engine`, :mod:`breaker`, :mod:`leader` (``next_spec``)
* I/O: :mod:`probes`, :mod:`hostexec`, :mod:`kube`, :mod:`agent`, :mod:`controller`, :mod:`health`,
  :mod:`metrics` (per-GPU Prometheus metrics), :mod:`httpd` (their read-only HTTP server),
  :mod:`actuator`, :mod:`repairpod` (``gpu-health repair-pod``: a repair hook running in a pod on
  the node), :mod:`slurm`; entry point :mod:`main`
* tests only: :mod:`inject` (``gpu-health inject-xid``: synthetic XID lines for conformance runs)
"""

__all__ = [
    "actuator", "agent", "breaker", "checks", "conditions", "controller", "engine", "errors", "findings",
    "health", "hostexec", "httpd", "inject", "kube", "leader", "main", "metrics", "parse_ib", "parse_kmsg", "parse_nvlink", "parse_nvsmi", "pci", "pcie",
    "probes", "repairpod", "slurm", "xidpolicy",
]
