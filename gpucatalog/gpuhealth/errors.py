"""The exception tree of gpu-health (its own image: it cannot use ``gpucatalog.core.errors``).

::

    GpuHealthError
    ├── ConfigError          bad flags/values; exit 2 from ``main``
    ├── ProbeError           a probe's input was missing or garbage; the agent reports it as a
    │                        ``GpuHealthProbeError`` condition and keeps running
    └── RemediationError     raised by controller I/O; carries its own retry policy
        ├── TemporaryError(delay)   try the same step again after ``delay`` seconds
        │                           (PDB refused an eviction, API server unreachable, 409 conflict)
        └── PermanentError          the step can never succeed as asked (node deleted, actuator
                                    rejected the action); the engine escalates instead of retrying

Raised by probes, actuators and the Kubernetes I/O layer; caught only by the agent loop, the
controller loop and ``main``.
"""

from __future__ import annotations


class GpuHealthError(Exception):
    """Base of every error gpu-health raises on purpose."""


class ConfigError(GpuHealthError):
    """A flag, environment variable or values entry is invalid; names the option."""


class ProbeError(GpuHealthError):
    """A probe could not produce a reading (missing file, command failed, unparsable output)."""

    def __init__(self, probe: str, message: str) -> None:
        super().__init__(f"{probe}: {message}")
        self.probe = probe
        self.detail = message


class RemediationError(GpuHealthError):
    """A controller step failed; the subclass says whether and when to retry."""


class TemporaryError(RemediationError):
    """Retry the same step after ``delay`` seconds."""

    def __init__(self, message: str, delay: float = 5.0) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(RemediationError):
    """Retrying cannot help; the engine escalates (or drops a vanished node)."""
