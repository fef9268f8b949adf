"""`kill -USR1` on a catalog command writes its threads' Python stacks to stderr and the command
goes on: how a command that seems hung is diagnosed (the Ctrl-C test uses it on a hang)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

CODE = """
import sys, time
from gpucatalog import cli
try:
    cli.main(["--help"])
except SystemExit:
    pass
print("ready", flush=True)
time.sleep(20)
print("went on", flush=True)
"""


def test_sigusr1_dumps_the_stacks_and_the_command_goes_on() -> None:
    proc = subprocess.Popen([sys.executable, "-c", CODE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # --help's usage first
            if line.strip() == "ready":
                break
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        assert proc.poll() is None, "the command ended on SIGUSR1"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Current thread" in err and 'File "<string>"' in err, err
