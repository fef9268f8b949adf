"""``catalog certify --cluster kubeconfig=X`` against a server that refuses connections fails at
once, as ``catalog install`` does: exit 2 naming the server, not a wait of --ready-timeout."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gpucatalog import cli


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed on return: nothing listens there


@pytest.mark.toolchain  # renders the bundle with helm first
@pytest.mark.timeout(120)
def test_unreachable_kubeconfig_fails_fast_naming_the_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = f"https://127.0.0.1:{_unused_port()}"
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        f"apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    # a ready timeout far beyond the test's own: only failing before the wait passes
    rc = cli.main(["certify", "gpu-scheduling", "--cluster", f"kubeconfig={kc}", "--profile", "h100-8x",
                   "--ready-timeout", "600"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"API server {server} is unreachable" in err and str(kc) in err
