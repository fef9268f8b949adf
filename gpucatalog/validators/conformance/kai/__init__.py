"""KAI Scheduler's conformance: its parameters, preflight and watchdog, workspaces and pods, the
frame its suites build on, its side of the queueing contract, and the ``fractional_gpu`` suite."""
