"""Kueue's side of the queueing contract: its space (cohorts, ClusterQueues, LocalQueues) and
adapter."""
