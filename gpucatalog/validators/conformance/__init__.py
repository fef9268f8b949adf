"""Conformance suites. Each talks only to the Kubernetes API (and Slurm's), never to a provider,
so the same suite runs on the sim cluster, kind, and a real GPU cluster.

``SUITES`` maps a suite name to the module that implements ``run(ctx) -> SuiteResult``.
"""

SUITES: dict[str, str] = {
    "fractional_gpu": "gpucatalog.validators.conformance.kai.fractional_gpu",
    "quota_reclaim": "gpucatalog.validators.conformance.queueing_suites.quota_reclaim",
    "gang": "gpucatalog.validators.conformance.queueing_suites.gang",
    "scale": "gpucatalog.validators.conformance.queueing_suites.scale",
    "fault_remediation": "gpucatalog.validators.conformance.remediation.fault_remediation",
    "slurm": "gpucatalog.validators.conformance.slurm.suite",
    "gpu_sharing_dra": "gpucatalog.validators.conformance.dra.gpu_sharing_dra",
    "accelerator_metrics": "gpucatalog.validators.conformance.metrics.accelerator_metrics",
}
