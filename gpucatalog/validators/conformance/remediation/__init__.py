"""The ``fault_remediation`` conformance suite: what gpu-health promises to write on a Node, and
what every case works with."""
