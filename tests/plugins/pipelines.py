"""A pytest plugin (loaded by the root conftest): signing keys, a catalog folder that trusts them, signed evidence, and a real local OCI registry, for the pipelines and CLI tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.core import executor
from gpucatalog.pipelines import evidence, keys, sample, trust
from gpucatalog.validators.conformance.kit import base

DIGEST_A = "sha256:" + "a1" * 32
DIGEST_B = "sha256:" + "b2" * 32


@pytest.fixture(scope="session")
def suites() -> list[base.SuiteResult]:
    return sample.run()


@pytest.fixture(scope="session")
def passing_suites(suites: list[base.SuiteResult]) -> list[base.SuiteResult]:
    return [s for s in suites if s.result == "passed"]


@pytest.fixture
def ci_key(tmp_path: Path) -> keys.GeneratedKey:
    return keys.generate(tmp_path / "keys", "ci")


@pytest.fixture
def rogue_key(tmp_path: Path) -> keys.GeneratedKey:
    return keys.generate(tmp_path / "keys", "rogue")


@pytest.fixture
def catalog_dir(tmp_path: Path, ci_key: keys.GeneratedKey) -> Path:
    """A catalog folder with a candidate -> stable policy and a trust file trusting ``ci``."""
    root = tmp_path / "catalog"
    (root / "channels").mkdir(parents=True)
    (root / "channels" / "policy.yaml").write_text(yaml.safe_dump({
        "apiVersion": "gpu-catalog.dev/v1alpha1",
        "kind": "PromotionPolicy",
        "channels": {
            "candidate": {"requiredProfiles": ["sim"], "requiredSuites": {"*": ["fractional_gpu"]},
                          "requireBundleSuites": True},
            "stable": {"sourceChannel": "candidate", "requiredProfiles": ["sim"],
                       "requiredSuites": {"*": ["fractional_gpu"]}, "requireBundleSuites": True},
        },
    }))
    trust.add_key(root / "trust.yaml", "ci", keys.load_public(ci_key.public_path), ["candidate", "stable"])
    return root


MakeEvidence = Callable[..., Path]


@pytest.fixture
def make_evidence(tmp_path: Path, ci_key: keys.GeneratedKey, passing_suites: list[base.SuiteResult]) -> MakeEvidence:
    counter = iter(range(1000))

    def make(bundle: str = "gpu-scheduling", version: str = "0.1.0", profile: str = "sim",
             digest: str = DIGEST_A, suites: list[Any] | None = None, key: Path | None = None,
             extra: dict[str, Any] | None = None,
             kubernetes: str | None = None, exploratory: bool = False) -> Path:
        out = tmp_path / f"evidence-{next(counter)}"
        cluster = dict(sample.CLUSTER, **({"kubernetesVersion": kubernetes} if kubernetes else {}))
        statement = evidence.build_statement(
            bundle=bundle, version=version, profile=profile, digest=digest, cluster=cluster,
            tools={"helm": "v4.3.2"}, suites=passing_suites if suites is None else suites,
            started=time.time() - 5, finished=time.time(), extra=extra, exploratory=exploratory,
        )
        evidence.write_evidence(out, statement, key or ci_key.private_path)
        return out

    return make


# --- a real OCI registry (Debian's docker-registry, the CNCF distribution server) on loopback ---

REGISTRY_BIN = shutil.which("docker-registry") or "/usr/bin/docker-registry"


@dataclass
class LocalRegistry:
    port: int
    storage: Path

    @property
    def oci(self) -> str:
        return f"oci://127.0.0.1:{self.port}"

    def blob_file(self, digest: str) -> Path:
        algo, hexd = digest.split(":")
        return self.storage / "docker/registry/v2/blobs" / algo / hexd[:2] / hexd / "data"

    def catalog(self) -> list[str]:
        import json
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v2/_catalog") as r:
            repos: list[str] = json.loads(r.read())["repositories"]
            return repos


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def start_registry(tmp_path: Path) -> Iterator[Callable[[str], LocalRegistry]]:
    if not os.path.exists(REGISTRY_BIN):
        pytest.skip("no OCI registry: apt-get install -y docker-registry")
    procs = []

    def start(name: str) -> LocalRegistry:
        port = _free_port()
        root = tmp_path / f"registry-{name}"
        root.mkdir()
        cfg = root / "config.yml"
        cfg.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
                       f"  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n")
        proc = executor.spawn([REGISTRY_BIN, "serve", cfg], log_path=root / "registry.log")
        procs.append(proc)
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1):
                    break
            except (urllib.error.URLError, ConnectionError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("registry did not start: " + (root / "registry.log").read_text()) from None
                time.sleep(0.1)
        return LocalRegistry(port, root / "data")

    yield start
    for p in procs:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(10)
