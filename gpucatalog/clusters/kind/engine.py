"""The Docker engine kind runs on: the machine's own where one answers, else one gpu-catalog starts.

``catalog engine up`` (``make setup``) starts Debian's ``dockerd`` for the project with its own
data root under ``$GPU_CATALOG_CACHE/engine`` and its socket at :data:`SOCKET` (a unix socket
only, never TCP). It leaves the host's iptables and IP forwarding alone: kind's nodes share one
bridge, and its API server port is published by docker-proxy on 127.0.0.1. Where this machine's
capability bounding set lacks capabilities runc asks for, the engine's default runtime is
:mod:`.capfilter`, which drops only those (docs/kind.md); elsewhere it is plain runc.

Every docker and kind command gpu-catalog runs gets :func:`env`: the project's socket when its
engine runs, nothing when the machine's own engine answers or ``DOCKER_HOST`` is set.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

from gpucatalog.clusters.kind import capfilter
from gpucatalog.core import errors, executor
from gpucatalog.toolchain import build

Progress = Callable[[str], None]

RUN_DIR = Path("/run/gpu-catalog")
SOCKET = RUN_DIR / "docker.sock"
START_TIMEOUT_S = 60.0


def _quiet(_msg: str) -> None:
    return None


def state_dir() -> Path:
    return build.cache_root() / "engine"


def _answers(env: dict[str, str]) -> bool:
    if shutil.which("docker") is None:
        return False
    proc = executor.run(["docker", "info", "--format", "{{.ServerVersion}}"], env=env, check=False, timeout=20)
    return proc.returncode == 0


def ours_running() -> bool:
    return SOCKET.exists() and _answers({"DOCKER_HOST": f"unix://{SOCKET}"})


def env() -> dict[str, str]:
    """Environment for docker and kind: empty when ``DOCKER_HOST`` is set or the machine's own
    engine answers, the project's socket when its engine runs (and nothing runs otherwise)."""
    if os.environ.get("DOCKER_HOST"):
        return {}
    if SOCKET.exists():
        return {"DOCKER_HOST": f"unix://{SOCKET}"}
    return {}


def runtime_missing_caps() -> set[str]:
    """Capabilities runc would ask for that this machine's bounding set lacks (empty: plain runc works)."""
    return capfilter.missing_caps(capfilter.bounding_set(Path("/proc/self/status").read_text()))


def daemon_config(data_root: Path, wrapper: Path | None) -> dict[str, object]:
    """dockerd's configuration: own data root, exec root and socket; no iptables or forwarding changes;
    the runtime wrapper as default runtime only when ``wrapper`` is given."""
    cfg: dict[str, object] = {
        "data-root": str(data_root),
        "exec-root": str(RUN_DIR / "exec"),
        "pidfile": str(RUN_DIR / "dockerd.pid"),
        "hosts": [f"unix://{SOCKET}"],
        "iptables": False,
        "ip-forward": False,
        "ip-masq": False,
        "storage-driver": "overlay2",
        "log-driver": "json-file",
        "log-opts": {"max-size": "10m", "max-file": "2"},
    }
    if wrapper is not None:
        cfg["runtimes"] = {"capfilter": {"path": str(wrapper)}}
        cfg["default-runtime"] = "capfilter"
    return cfg


def up(say: Progress = _quiet) -> str:
    """Make sure an engine answers; returns how (``machine``, ``DOCKER_HOST`` or the project's socket)."""
    if os.environ.get("DOCKER_HOST"):
        if not _answers({}):
            raise errors.InputError(f"DOCKER_HOST={os.environ['DOCKER_HOST']} does not answer", field="DOCKER_HOST",
                                    expected="a running Docker engine, or DOCKER_HOST unset")
        return f"DOCKER_HOST={os.environ['DOCKER_HOST']}"
    if ours_running():
        return f"unix://{SOCKET} (gpu-catalog's engine)"
    if _answers({}):
        return "the machine's Docker engine"
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise errors.InputError("no Docker engine runs and dockerd is not installed", field="engine",
                                expected="Debian's docker.io (`make setup` installs it as root)")
    if os.geteuid() != 0:
        raise errors.InputError("starting dockerd needs root", field="engine",
                                expected="run `catalog engine up` as root, or start a Docker engine yourself")
    st = state_dir()
    st.mkdir(parents=True, exist_ok=True)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    missing = runtime_missing_caps()
    wrapper = None
    if missing:
        wrapper = st / "runc-capfilter"
        shutil.copyfile(capfilter.__file__, wrapper)
        wrapper.chmod(0o755)
        say(f"runtime wrapper: this machine's bounding set lacks {', '.join(sorted(missing))}")
    cfg = st / "daemon.json"
    cfg.write_text(json.dumps(daemon_config(st / "data", wrapper), indent=1) + "\n")
    SOCKET.unlink(missing_ok=True)
    say(f"starting dockerd (data {st / 'data'}, socket {SOCKET})")
    proc = executor.spawn([dockerd, "--config-file", cfg], log_path=st / "dockerd.log")
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ours_running():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = (st / "dockerd.log").read_text(errors="replace")[-1500:]
            raise errors.ToolError([dockerd, "--config-file", str(cfg)], proc.poll() or 1,
                                   f"dockerd did not answer on {SOCKET} within {START_TIMEOUT_S:.0f} s:\n{tail}")
        time.sleep(0.3)
    return f"unix://{SOCKET} (gpu-catalog's engine, started)"


def down(say: Progress = _quiet) -> bool:
    """Stop the project's engine (its containers stop with it); False when it was not running."""
    pidfile = RUN_DIR / "dockerd.pid"
    if not pidfile.is_file():
        return False
    pid = int(pidfile.read_text().strip() or 0)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pidfile.unlink(missing_ok=True)
        return False
    say(f"stopping dockerd (pid {pid})")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.3)
    SOCKET.unlink(missing_ok=True)
    return True
