#!/usr/bin/python3
"""An OCI runtime in front of runc for machines whose capability bounding set is short.

Some machines (this project's among them) run everything without ``CAP_SYS_RESOURCE`` in the
bounding set. runc then fails every privileged container (``unable to apply caps: operation not
permitted``: it asks for every capability) and every container with a negative OOM score
(``failed to update /proc/self/oom_score_adj``: lowering it needs that capability), which is
every kind node's control plane. This wrapper edits the container's OCI spec before runc reads
it, and changes nothing else:

- capabilities missing from the bounding set are dropped (no process here could hold them);
- without ``CAP_SYS_RESOURCE``, an OOM score below the caller's own is raised to it.

dockerd takes it as its default runtime (``catalog engine up`` sets that only where the bounding
set requires it), and the kind node image names it as containerd's runc binary, for the
containers kubelet starts inside a node. Standard library only: it runs on the host and inside
nodes, before anything of gpu-catalog is importable there.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

# capability(7) numbers, in order
CAPS = ("CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
        "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
        "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
        "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
        "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
        "CHECKPOINT_RESTORE")


def bounding_set(status: str) -> int:
    """The CapBnd mask of a /proc/<pid>/status text."""
    for line in status.splitlines():
        if line.startswith("CapBnd:"):
            return int(line.split()[1], 16)
    return (1 << 64) - 1


def missing_caps(mask: int) -> set[str]:
    """Names (``CAP_…``) of the known capabilities absent from ``mask``."""
    return {f"CAP_{name}" for i, name in enumerate(CAPS) if not mask >> i & 1}


def fix_process(process: dict[str, object], missing: set[str], own_oom_score: int) -> bool:
    """Edit one OCI ``process`` object in place; True when anything changed."""
    changed = False
    caps = process.get("capabilities")
    if isinstance(caps, dict):
        for kind, names in caps.items():
            if isinstance(names, list):
                kept = [n for n in names if n not in missing]
                if kept != names:
                    caps[kind] = kept
                    changed = True
    score = process.get("oomScoreAdj")
    if "CAP_SYS_RESOURCE" in missing and isinstance(score, int) and score < own_oom_score:
        process["oomScoreAdj"] = own_oom_score
        changed = True
    return changed


def spec_file(args: list[str]) -> tuple[Path, bool] | None:
    """The JSON file runc will read for ``args`` and whether it is a whole bundle config (True) or a
    bare process (``exec --process``, False); None for commands that start no process."""
    if "create" in args or "run" in args:
        bundle = args[args.index("--bundle") + 1] if "--bundle" in args else (
            args[args.index("-b") + 1] if "-b" in args else ".")
        return Path(bundle) / "config.json", True
    if "exec" in args and "--process" in args:
        return Path(args[args.index("--process") + 1]), False
    return None


def real_runc(self_path: str) -> str:
    """The runc this wraps: ``$GPU_CATALOG_RUNC``, else the first ``runc`` on PATH that is not this file."""
    if os.environ.get("GPU_CATALOG_RUNC"):
        return os.environ["GPU_CATALOG_RUNC"]
    me = os.path.realpath(self_path)
    for d in os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin").split(":"):
        cand = shutil.which("runc", path=d)
        if cand and os.path.realpath(cand) != me:
            return cand
    sys.stderr.write("capfilter: no runc on PATH\n")
    sys.exit(127)


def main(argv: list[str]) -> None:
    args = argv[1:]
    target = spec_file(args)
    if target is not None and target[0].is_file():
        path, whole = target
        doc = json.loads(path.read_text())
        process = doc.get("process") if whole else doc
        missing = missing_caps(bounding_set(Path("/proc/self/status").read_text()))
        own = int(Path("/proc/self/oom_score_adj").read_text())
        if isinstance(process, dict) and fix_process(process, missing, own):
            tmp = path.with_name(path.name + ".capfilter")
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, path)
    runc = real_runc(argv[0])
    os.execv(runc, ["runc", *args])


if __name__ == "__main__":
    main(sys.argv)
