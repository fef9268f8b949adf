"""Conformance suites. Each talks only to the Kubernetes API (and Slurm's), never to a provider,
so the same suite runs on the sim cluster, kind, and a real GPU cluster.

``SUITES`` maps a suite name to the module that implements ``run(ctx) -> SuiteResult``.
"""

SUITES: dict[str, str] = {
    "fractional_gpu": "gpucatalog.validators.conformance.fractional_gpu",
    "quota_reclaim": "gpucatalog.validators.conformance.quota_reclaim",
    "gang": "gpucatalog.validators.conformance.gang",
    "fault_remediation": "gpucatalog.validators.conformance.fault_remediation",
    "slurm": "gpucatalog.validators.conformance.slurm_suite",
    "gpu_sharing_dra": "gpucatalog.validators.conformance.gpu_sharing_dra",
    "accelerator_metrics": "gpucatalog.validators.conformance.accelerator_metrics",
}
