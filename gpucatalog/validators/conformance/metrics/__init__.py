"""The ``accelerator_metrics`` conformance suite and its reader of the Prometheus text format."""
