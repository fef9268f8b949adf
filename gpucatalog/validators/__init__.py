"""Validators: static checks of rendered bundles, cluster providers, and conformance suites."""
