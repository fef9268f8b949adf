"""A private MariaDB on 127.0.0.1 for slurmdbd (Slurm accounting: associations and GPU limits).

The data folder is created once per cluster with ``mariadb-install-db``; the server runs as a
foreground process under the supervisor with a small buffer pool. Called by :mod:`.cluster`.
"""

from __future__ import annotations

import time

from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.clusters.slurm.processes import Supervisor, log_tail
from gpucatalog.core import errors, executor

DB_USER = "slurm"


def start(sup: Supervisor, layout: Layout, port: int, password: str, timeout: float = 60.0) -> None:
    layout.mysql.mkdir(parents=True, exist_ok=True)
    executor.run(
        [
            "mariadb-install-db", "--no-defaults", f"--datadir={layout.mysql}", "--user=root",
            "--auth-root-authentication-method=socket", "--skip-test-db",
        ],
        timeout=timeout,
    )
    d = sup.start(
        "mariadbd",
        [
            "mariadbd", "--no-defaults", f"--datadir={layout.mysql}", "--user=root",
            f"--socket={layout.mysql_socket}", f"--port={port}", "--bind-address=127.0.0.1",
            f"--pid-file={layout.run / 'mariadbd.pid'}", "--skip-name-resolve",
            "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M",
            "--performance-schema=OFF",
        ],
        layout.log / "mariadbd.log",
    )
    sql = (
        f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{password}';"
        f"GRANT ALL ON slurm_acct_db.* TO '{DB_USER}'@'127.0.0.1';"
    )
    deadline = time.monotonic() + timeout
    while True:
        if d.proc.poll() is not None:
            raise errors.ToolError(["mariadbd"], d.proc.returncode or 0, log_tail(d.log))
        res = executor.run(
            ["mariadb", "--no-defaults", f"--socket={layout.mysql_socket}", "-u", "root", "-e", sql],
            check=False, timeout=30,
        )
        if res.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise errors.ToolError(["mariadb", "-e", "CREATE USER …"], res.returncode, res.stderr)
        time.sleep(0.2)
