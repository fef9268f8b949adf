"""The cache folder (``$GPU_CATALOG_CACHE``, default ``~/.cache/gpu-catalog``): pinned tool builds,
sim clusters' state, assembled charts, locks.

Many modules write below it; when it cannot be written (read-only file system, a file in the way,
no permission) the CLI's top-level handler asks :func:`unusable` to turn the ``OSError`` into one
clean line (exit 2) instead of a traceback from deep inside whichever module wrote first.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpucatalog.core import errors

ENV = "GPU_CATALOG_CACHE"
# what an unwritable folder raises (EEXIST: a file where a folder must be made)
_UNWRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST, errno.ENOSPC, errno.EDQUOT}


def root() -> Path:
    value = os.environ.get(ENV, "")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "gpu-catalog"


def _under(path: Path, base: Path) -> bool:
    return path == base or base in path.parents


def unusable(exc: OSError) -> errors.InputError | None:
    """The bad-input error for ``exc`` when it failed on a path in the cache folder; else None."""
    if exc.errno not in _UNWRITABLE or not exc.filename:
        return None
    base = Path(os.path.abspath(root()))
    where = Path(os.path.abspath(os.fsdecode(exc.filename)))
    if not _under(where, base):
        return None
    return errors.InputError(
        f"the cache folder {base} cannot be written ({exc.strerror}: {where})", field=ENV,
        expected=f"a writable folder: fix its permissions, or point ${ENV} at another one")


@contextmanager
def building(out: Path) -> Iterator[bool]:
    """Held while the cached artifact ``out`` is built; yields whether it still needs building.
    Test workers and concurrent certifications build the same artifacts: a second builder waits
    for the first and finds ``out`` made, rather than writing the same partial file beside it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(out.name + ".lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield not out.exists()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
