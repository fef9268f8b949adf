"""Slurm hook: drain a node's Slurm twin when gpu-health quarantines it, resume it after repair.

The controller owns every drain whose reason starts with its prefix (default ``gpu-health:``)
and only resumes such drains, never one an operator or another tool set. The Slurm issue's
implementation plugs in here; :class:`ScontrolSlurm` is a small ``scontrol``-based one and
:class:`NoSlurm` the default when the node runs no Slurm.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gpucatalog.gpuhealth import hostexec
from gpucatalog.gpuhealth.errors import PermanentError, TemporaryError

DEFAULT_PREFIX = "gpu-health:"


class SlurmHook(Protocol):
    prefix: str

    def drain(self, node: str, reason: str) -> bool:
        """Drain ``node`` with ``reason`` (which starts with ``prefix``), leaving alone a node
        someone else drained (a reason without ``prefix``); True when this call drained it."""
        ...

    def resume(self, node: str) -> None:
        """Resume ``node`` if and only if its drain reason starts with ``prefix``."""
        ...

    def state(self, node: str) -> tuple[str, str]:
        """(Slurm state, reason) of ``node``; ("", "") when Slurm does not know it."""
        ...

    def busy(self, node: str) -> bool:
        """True while Slurm runs (or is ending) jobs on ``node``."""
        ...


@dataclass
class NoSlurm:
    prefix: str = DEFAULT_PREFIX

    def drain(self, node: str, reason: str) -> bool:
        return False

    def resume(self, node: str) -> None:
        return None

    def state(self, node: str) -> tuple[str, str]:
        return "", ""

    def busy(self, node: str) -> bool:
        return False


_STATE = re.compile(r"\bState=(\S+)")
BUSY = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})
_REASON = re.compile(r"\bReason=(.*?)(?:\s+\[[^\]]*\])?\s*$", re.M)


@dataclass
class ScontrolSlurm:
    scontrol: Sequence[str] = ("scontrol",)
    prefix: str = DEFAULT_PREFIX
    timeout: float = 20.0

    def _run(self, *args: str) -> str:
        try:
            res = hostexec.run([*self.scontrol, *args], timeout=self.timeout)
        except hostexec.CommandError as exc:
            raise TemporaryError(str(exc), delay=15) from exc
        if res.returncode != 0:
            msg = (res.stderr or res.stdout).strip()
            if "Invalid node name" in msg:
                raise PermanentError(f"Slurm does not know node: {msg}")
            raise TemporaryError(f"scontrol {' '.join(args)}: {msg}", delay=15)
        return res.stdout

    def drain(self, node: str, reason: str) -> bool:
        """Drain ``node`` unless someone else already drained it; True when this call drained it.

        A drain whose reason lacks our prefix belongs to an operator or another tool: replacing
        its reason would make our later ``resume`` release a node a person wants kept out.
        """
        state, current = self.state(node)
        if "DRAIN" in state.upper() and not current.startswith(self.prefix):
            return False
        if not reason.startswith(self.prefix):
            reason = f"{self.prefix} {reason}"
        self._run("update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")
        return True

    def state(self, node: str) -> tuple[str, str]:
        out = self._run("show", "node", node)
        st = _STATE.search(out)
        rs = _REASON.search(out)
        return (st.group(1) if st else ""), (rs.group(1).strip() if rs else "")

    def busy(self, node: str) -> bool:
        """Slurm's node state names jobs on it: ALLOCATED or MIXED (running), COMPLETING (ending),
        e.g. ``MIXED+DRAIN``; a drained node with none left reads ``IDLE+DRAIN``."""
        state, _reason = self.state(node)
        return bool(BUSY & set(state.upper().split("+")))

    def resume(self, node: str) -> None:
        state, reason = self.state(node)
        if "DRAIN" in state.upper() and reason.startswith(self.prefix):
            self._run("update", f"NodeName={node}", "State=RESUME")
