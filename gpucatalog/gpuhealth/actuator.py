"""Repair actuators: how a GPU reset, a reboot or a hardware-repair request is carried out.

Pluggable by configuration (``--actuator-config`` JSON, rendered by the chart from values):

* ``command`` — run a hook per action (argv template with ``{node}``, ``{action}``, ``{reason}``);
  exit 0 = repaired. On a real cluster the hook creates the site's reset/reboot job; gpu-health
  ships one such hook, ``gpu-health repair-pod`` (:mod:`.repairpod`), which runs the repair in a
  pod on the broken node.
* ``sim`` — the same, pointed at the sim cluster's fault-clearing hook: it "repairs" a simulated
  node by clearing the injected fault in the node's folder, so the real agent sees it heal.
* ``webhook`` (hardware repair only) — POST ``{"node", "action", "reason"}`` JSON to a ticket
  system; 2xx = ticket filed. The node then stays cordoned until a person resolves it.
* no actuator for an action — the repair "fails", and the engine escalates.

Called by :mod:`gpucatalog.gpuhealth.controller`; results are written back to the node.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpucatalog.gpuhealth import hostexec
from gpucatalog.gpuhealth.errors import ConfigError, TemporaryError
from gpucatalog.gpuhealth.xidpolicy import Action

SUCCEEDED = "succeeded"
FAILED = "failed"


class Actuator(Protocol):
    def repair(self, node: str, action: Action, reason: str) -> tuple[str, str]:
        """Carry out ``action``; return (``succeeded``|``failed``, detail). May raise TemporaryError."""
        ...


PLACEHOLDERS = ("node", "action", "reason")


def fill(template: Sequence[str], node: str, action: str, reason: str) -> list[str]:
    """A hook's argv: ``{node}``, ``{action}`` and ``{reason}`` filled in, once (``{{``/``}}``
    give literal braces). The values are never formatted again, so a reason with braces stays as
    it is."""
    return [part.format(node=node, action=action, reason=reason) for part in template]


def check_template(where: str, template: Sequence[str]) -> None:
    """ConfigError naming ``where`` and the part, for a template that :func:`fill` cannot fill."""
    for part in template:
        try:
            part.format(**dict.fromkeys(PLACEHOLDERS, ""))
        except (KeyError, IndexError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{where}: {part!r} is not a valid template ({type(exc).__name__}: {exc}); "
                              f"the placeholders are {{node}}, {{action}} and {{reason}}, and a literal "
                              "brace is written twice ({{ or }})") from exc


@dataclass
class CommandActuator:
    commands: Mapping[str, Sequence[str]]
    timeout: float = 300.0
    name: str = "command"

    def repair(self, node: str, action: Action, reason: str) -> tuple[str, str]:
        template = self.commands.get(action.name)
        if not template:
            return FAILED, f"no {self.name} hook configured for {action.name}"
        argv = fill(template, node, action.name, reason)
        try:
            res = hostexec.run(argv, timeout=self.timeout)
        except hostexec.CommandError as exc:
            return FAILED, str(exc)
        detail = (res.stdout.strip() or res.stderr.strip())[-300:]
        return (SUCCEEDED if res.returncode == 0 else FAILED), f"exit {res.returncode}: {detail}"


@dataclass
class WebhookActuator:
    url: str
    timeout: float = 10.0
    headers: Mapping[str, str] = field(default_factory=dict)

    def repair(self, node: str, action: Action, reason: str) -> tuple[str, str]:
        body = json.dumps({"node": node, "action": action.name, "reason": reason}).encode()
        req = urllib.request.Request(self.url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", **self.headers})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return SUCCEEDED, f"ticket filed: HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                raise TemporaryError(f"ticket webhook answered {exc.code}", delay=30) from exc
            return FAILED, f"ticket webhook rejected the request: HTTP {exc.code}"
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise TemporaryError(f"ticket webhook unreachable: {exc}", delay=30) from exc


@dataclass
class Router:
    """Picks the actuator per action; hardware repair may go to a webhook."""

    default: Actuator
    hardware: Actuator | None = None

    def repair(self, node: str, action: Action, reason: str) -> tuple[str, str]:
        if action is Action.HARDWARE_REPAIR and self.hardware is not None:
            return self.hardware.repair(node, action, reason)
        return self.default.repair(node, action, reason)


def from_config(cfg: Mapping[str, Any] | None) -> Router:
    """Build from ``{"kind": "command"|"sim"|"none", "commands": {ACTION: [argv…]},
    "timeoutSeconds": N, "hardwareRepair": {"webhookUrl": URL} | {"command": [argv…]}}``."""
    cfg = dict(cfg or {})
    kind = str(cfg.get("kind", "none"))
    commands = cfg.get("commands") or {}
    if not isinstance(commands, dict) or not all(isinstance(v, list) for v in commands.values()):
        raise ConfigError("actuator commands must map an action name to an argv list")
    for key in commands:
        try:
            Action[key]
        except KeyError as exc:
            raise ConfigError(f"actuator commands: unknown action {key!r}") from exc
        check_template(f"actuator commands.{key}", [str(a) for a in commands[key]])
    timeout = float(cfg.get("timeoutSeconds", 300))
    default: Actuator
    if kind in ("command", "sim"):
        default = CommandActuator({k: [str(a) for a in v] for k, v in commands.items()}, timeout, name=kind)
    elif kind == "none":
        default = CommandActuator({}, timeout, name="none")
    else:
        raise ConfigError(f"actuator kind {kind!r}: expected command, sim or none")
    hw_cfg = cfg.get("hardwareRepair") or {}
    hardware: Actuator | None = None
    if hw_cfg.get("webhookUrl"):
        hardware = WebhookActuator(str(hw_cfg["webhookUrl"]))
    elif hw_cfg.get("command"):
        check_template("actuator hardwareRepair.command", [str(a) for a in hw_cfg["command"]])
        hardware = CommandActuator({"HARDWARE_REPAIR": [str(a) for a in hw_cfg["command"]]}, timeout, "ticket")
    return Router(default, hardware)
