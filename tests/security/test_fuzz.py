"""Fuzz targets (Hypothesis) for the two parsers hostile input reaches first: the catalog loader
and the channel file parser. Seeded with real files and mutated (lines repeated, which makes
duplicate keys; lines replaced; text, anchors, aliases and invalid UTF-8 inserted; truncation).

Properties: the loader returns a catalog or raises InputError (exit 2), nothing else; a channel
file either loads, and then an append leaves exactly its entries plus the new one, or it is bad
input and stays byte-identical. Bounded for CI (``FUZZ_EXAMPLES``, default 150 per target, fixed
seed); raise it for a longer hunt, e.g. ``FUZZ_EXAMPLES=20000``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucatalog.catalog import loader
from gpucatalog.core import errors
from gpucatalog.pipelines import channels

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 1000,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# The per-test timeout grows with the hunt (up to about 0.1 s an input on a loaded 2-core
# machine): a longer hunt stopped by the default 120 s ended as a FlakyFailure, not a finding.
pytestmark = pytest.mark.timeout(120 + EXAMPLES // 2)
RUNS = {"loader": 0, "channel": 0}

BUNDLE = """\
apiVersion: gpu-catalog.dev/v1alpha1
kind: Bundle
metadata: {name: mini, version: 0.1.0}
spec:
  description: two demo components
  kubernetesVersion: 1.36.3
  suites: [fault_remediation]
  components:
    - {name: beta, version: 1.0.0, namespace: demo, dependsOn: [alpha], values: {replicas: 2}}
    - name: alpha
      version: 1.0.0
      namespace: demo
  profiles:
    sim:
      values: {alpha: {replicas: 3}}
      cluster: {nodes: 4}
    kind: {}
"""
COMPONENT = "apiVersion: gpu-catalog.dev/v1alpha1\nkind: Component\nmetadata: {name: alpha}\nspec: {description: a}\n"
DIGEST = "sha256:" + "ab" * 32


def _entry(version: str) -> dict[str, Any]:
    return {"bundle": "mini", "version": version, "digest": DIGEST, "promotedAt": "2026-01-01T00:00:00Z",
            "promotedBy": "ci", "evidenceDigest": DIGEST, "policyDigest": DIGEST, "trustDigest": DIGEST,
            "evidence": [{"profile": "sim", "digest": DIGEST, "evidenceDigest": DIGEST, "signer": "ci"}]}


CHANNEL = ("apiVersion: gpu-catalog.dev/v1alpha1\nkind: Channel\nchannel: candidate\nentries:\n"
           + yaml.safe_dump([_entry("0.1.0"), _entry("0.2.0")], sort_keys=False))

SNIPPETS = ["&a ", "*a", "<<: *a", "- ", ": ", "{", "}", "[", "]", "---\n", "...\n", "\t", "#", "!!python/object:os.system",
            "entries:\n", "kind: Channel\n", "version: 9\n", "\"", "'", "? ", "|\n", ">-\n", "%YAML 1.1\n", "&b [*b]"]

mutation = st.tuples(st.sampled_from(["repeat", "replace", "insert", "snippet", "truncate", "bytes"]),
                     st.integers(min_value=0, max_value=10_000),
                     st.one_of(st.text(max_size=30), st.sampled_from(SNIPPETS)),
                     st.binary(max_size=8))


def mutate(text: str, ops: list[tuple[str, int, str, bytes]]) -> bytes:
    data = text.encode()
    for op, at, txt, raw in ops:
        lines = data.split(b"\n")
        i = at % max(len(lines), 1)
        if op == "repeat":
            lines.insert(i, lines[i])
        elif op == "replace":
            lines[i] = txt.encode("utf-8", "surrogatepass")
        elif op in ("insert", "snippet"):
            pos = at % (len(data) + 1)
            data = data[:pos] + txt.encode("utf-8", "surrogatepass") + data[pos:]
            continue
        elif op == "truncate":
            data = data[: at % (len(data) + 1)]
            continue
        else:
            pos = at % (len(data) + 1)
            data = data[:pos] + raw + data[pos:]
            continue
        data = b"\n".join(lines)
    return data


@FUZZ
@given(st.lists(mutation, min_size=1, max_size=4))
def test_catalog_loader_returns_or_refuses(ops: list[tuple[str, int, str, bytes]]) -> None:
    RUNS["loader"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "catalog"
        (root / "components" / "alpha").mkdir(parents=True)
        (root / "bundles" / "mini").mkdir(parents=True)
        (root / "components" / "alpha" / "component.yaml").write_text(COMPONENT)
        (root / "bundles" / "mini" / "0.1.0.yaml").write_bytes(mutate(BUNDLE, ops))
        try:
            cat = loader.load_catalog(root)
        except errors.InputError:
            return
        for b in cat.bundles.values():
            assert isinstance(b.kube_version, str) and isinstance(b.profiles, dict)


@FUZZ
@given(st.lists(mutation, min_size=1, max_size=4))
def test_channel_loads_and_appends_or_refuses_unchanged(ops: list[tuple[str, int, str, bytes]]) -> None:
    RUNS["channel"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "channels"
        d.mkdir()
        path = d / "candidate.yaml"
        path.write_bytes(mutate(CHANNEL, ops))
        raw = path.read_bytes()
        try:
            before = list(channels.load(d, "candidate").entries)
        except errors.InputError:
            try:
                channels.append(d, "candidate", lambda _ch: _entry("9.9.9"))
            except errors.InputError:
                assert path.read_bytes() == raw
                return
            raise AssertionError("a channel file that does not load was appended to") from None
        new = _entry("9.9.9")
        try:
            channels.append(d, "candidate", lambda _ch: new)
        except errors.InputError:
            assert path.read_bytes() == raw
            return
        assert list(channels.load(d, "candidate").entries) == [*before, new]
        shutil.rmtree(d)


def test_report_fuzz_counts() -> None:
    """Prints how many inputs each target ran (pytest -s shows it; the report quotes it)."""
    print(f"fuzz inputs: loader {RUNS['loader']}, channel {RUNS['channel']} (FUZZ_EXAMPLES={EXAMPLES})")
