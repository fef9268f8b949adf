"""Fuzz targets (Hypothesis, fixed seed) for what decides trust: the evidence envelope and its
signed statement (through the judge), the trust file, the promotion policy and the AI conformance
mapping. Seeded from real files (a signed envelope as certify writes it, the repository's policy
and mapping, a trust file naming a real key) and mutated by replacing any one value of the
parsed document with an odd one (wrong type, deep nesting, huge or empty text, NaN).

Property: each reader returns a result or raises the InputError family (exit 2); the judge
returns a verdict, with reasons for anything but the untouched statement. Nothing else: no
TypeError, KeyError, AttributeError or RecursionError reaches a user as a traceback.
``FUZZ_EXAMPLES`` (default 150 per target) as in test_fuzz.py.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucatalog.core import errors
from gpucatalog.pipelines import ai_conformance, dsse, evidence, judge, keys, policy, trust

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 1000,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
pytestmark = pytest.mark.timeout(120 + EXAMPLES // 2)

REPO = Path(__file__).resolve().parents[2]
WORK = Path(tempfile.mkdtemp(prefix="fuzz-trust-"))
KEY = keys.generate(WORK / "keys", "ci")
PUB = keys.load_public(KEY.public_path)
DIGEST = "sha256:" + "a1" * 32

ODD = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30) | st.just("x" * 5000),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
) | st.just(json.loads("[" * 400 + "]" * 400))


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*at, i))
    return out


def _replace(doc: Any, at: tuple[Any, ...], value: Any) -> Any:
    if not at:
        return value
    copy = dict(doc) if isinstance(doc, dict) else list(doc)
    copy[at[0]] = _replace(doc[at[0]], at[1:], value)
    return copy


def _mutated(seed: Any) -> Any:
    """A strategy: ``seed`` with one value (anywhere, the whole document included) replaced."""
    paths = _paths(seed)
    return st.tuples(st.sampled_from(paths), ODD).map(lambda pv: _replace(seed, pv[0], pv[1]))


def _statement() -> dict[str, Any]:
    return evidence.build_statement(
        bundle="gpu-scheduling", version="0.1.0", profile="sim", digest=DIGEST,
        cluster={"provider": "sim", "kubernetesVersion": "v1.36.3",
                 "images": [{"image": "ghcr.io/kai-scheduler/kai-scheduler/scheduler", "executable": "/opt/s",
                             "sha256": "ab" * 32, "version": "v0.16.8", "live": True}]},
        tools={"helm": "v4.3.2"}, started=time.time(), finished=time.time(),
        suites=[{"name": "gang", "cases": [{"name": "all-or-nothing", "result": "passed", "details": {"n": 1}}]}],
        extra={"upgradeFrom": {"bundle": "gpu-scheduling", "version": "0.0.9", "digest": DIGEST},
               "upgrade": {"mode": "upgrade"}})


STATEMENT = _statement()
ENVELOPE = evidence.sign_statement(STATEMENT, keys.load_private(KEY.private_path))
CLAIM = judge.Claim("gpu-scheduling", "0.1.0", {keys.keyid(PUB): PUB}, lambda _p: DIGEST, suites=("gang",))


def _judged(envelope: Any) -> judge.Verdict | None:
    path = Path(tempfile.mkdtemp(dir=WORK)) / evidence.ENVELOPE
    path.write_text(json.dumps(envelope, allow_nan=True))
    try:
        return judge.judge(path, CLAIM)
    except errors.InputError:
        return None


def test_the_seeds_are_accepted() -> None:
    """The fuzz starts from inputs the readers accept, so a mutation is what they refuse."""
    v = _judged(ENVELOPE)
    assert v is not None and v.ok, v.reasons if v else None
    assert policy.load(REPO / "catalog" / "channels" / "policy.yaml").channels
    assert ai_conformance.load(REPO / "catalog" / "conformance" / "ai-v1.36.yaml").requirements


@FUZZ
@given(_mutated(ENVELOPE))
def test_an_envelope_is_judged_or_refused(envelope: Any) -> None:
    v = _judged(envelope)
    # whatever changed (a keyid is only a hint), an accepted envelope says exactly what was signed
    if v is not None and v.ok:
        assert v.statement == STATEMENT


@FUZZ
@given(_mutated(STATEMENT))
def test_a_signed_statement_is_judged_never_half_read(statement: Any) -> None:
    payload = json.dumps(statement, allow_nan=True).encode()
    sig = keys.load_private(KEY.private_path).sign(dsse.pae(evidence.PAYLOAD_TYPE, payload))
    env = {"payloadType": evidence.PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode(),
           "signatures": [{"keyid": KEY.keyid, "sig": base64.b64encode(sig).decode()}]}
    v = _judged(env)
    assert v is not None  # a well-formed envelope is always judged
    if json.dumps(statement, sort_keys=True) == json.dumps(STATEMENT, sort_keys=True):  # False == 0.0 in Python
        assert v.ok


def _yaml_file(doc: Any, name: str) -> Path:
    path = Path(tempfile.mkdtemp(dir=WORK)) / name
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except (yaml.YAMLError, RecursionError):
        text = json.dumps(doc, allow_nan=True)
    path.write_text(text)
    return path


TRUST_PATH = WORK / "trust.yaml"
trust.add_key(TRUST_PATH, "ci", PUB, ["candidate", "stable"])
TRUST = yaml.safe_load(TRUST_PATH.read_text())
POLICY = yaml.safe_load((REPO / "catalog" / "channels" / "policy.yaml").read_text())
MAPPING = yaml.safe_load((REPO / "catalog" / "conformance" / "ai-v1.36.yaml").read_text())


@FUZZ
@given(_mutated(TRUST))
def test_a_trust_file_loads_or_is_bad_input(doc: Any) -> None:
    try:
        tf = trust.load(_yaml_file(doc, "trust.yaml"))
    except errors.InputError:
        return
    for k in tf.keys:
        assert isinstance(k.keyid, str) and all(isinstance(c, str) for c in k.channels)
        tf.for_channel("stable")


@FUZZ
@given(_mutated(POLICY))
def test_a_policy_loads_or_is_bad_input(doc: Any) -> None:
    try:
        pol = policy.load(_yaml_file(doc, "policy.yaml"))
    except errors.InputError:
        return
    for name, c in pol.channels.items():
        assert c.user_supplied_binaries in judge.USER_SUPPLIED
        c.suites_for("gpu-scheduling", ("gang",))
        assert pol.channel(name) is c


@FUZZ
@given(_mutated(MAPPING))
def test_a_conformance_mapping_loads_or_is_bad_input(doc: Any) -> None:
    try:
        m = ai_conformance.load(_yaml_file(doc, "ai-v1.36.yaml"))
    except errors.InputError:
        return
    for r in m.requirements:
        for proof in r.proofs.values():
            assert all(isinstance(c, str) for c in proof.cases)
