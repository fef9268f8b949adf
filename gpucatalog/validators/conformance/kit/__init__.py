"""The kit every conformance suite shares: the suite context and case runner (``base``), the
Kubernetes client, the cluster's GPU inventory and the pod fault injector. Imports no stack."""
