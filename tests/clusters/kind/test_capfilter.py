"""The runtime wrapper: which capabilities it drops, the OOM score it raises, and that it hands
runc exactly the spec it edited (run as a program, with a stand-in runc that records its call)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpucatalog.clusters.kind import capfilter

FULL = (1 << 41) - 1  # every capability up to CAP_CHECKPOINT_RESTORE (40)
NO_SYS_RESOURCE = FULL & ~(1 << 24)  # this project's machines: 0x1fffeffffff


def test_bounding_set_is_read_from_proc_status() -> None:
    status = "Name:\tx\nCapEff:\t000001ffffffffff\nCapBnd:\t000001fffeffffff\n"
    assert capfilter.bounding_set(status) == 0x1FFFEFFFFFF == NO_SYS_RESOURCE
    assert capfilter.missing_caps(NO_SYS_RESOURCE) == {"CAP_SYS_RESOURCE"}
    assert capfilter.missing_caps(FULL) == set()
    assert capfilter.missing_caps(FULL & ~1 & ~(1 << 21)) == {"CAP_CHOWN", "CAP_SYS_ADMIN"}


def _privileged_process(score: int) -> dict[str, object]:
    every = [f"CAP_{n}" for n in capfilter.CAPS]
    return {"capabilities": {k: list(every) for k in ("bounding", "effective", "permitted")},
            "oomScoreAdj": score, "args": ["/pause"]}


def test_missing_capabilities_are_dropped_from_every_set_and_nothing_else() -> None:
    proc = _privileged_process(0)
    assert capfilter.fix_process(proc, {"CAP_SYS_RESOURCE"}, own_oom_score=0) is True
    caps = proc["capabilities"]
    assert isinstance(caps, dict)
    for names in caps.values():
        assert "CAP_SYS_RESOURCE" not in names and len(names) == len(capfilter.CAPS) - 1
    assert proc["oomScoreAdj"] == 0 and proc["args"] == ["/pause"]


def test_an_oom_score_below_the_callers_is_raised_only_without_sys_resource() -> None:
    proc = _privileged_process(-998)  # kubelet's score for a sandbox
    capfilter.fix_process(proc, {"CAP_SYS_RESOURCE"}, own_oom_score=-500)
    assert proc["oomScoreAdj"] == -500
    proc = _privileged_process(-998)
    assert capfilter.fix_process(proc, set(), own_oom_score=0) is False  # a full bounding set: untouched
    assert proc["oomScoreAdj"] == -998
    proc = _privileged_process(100)
    capfilter.fix_process(proc, {"CAP_SYS_RESOURCE"}, own_oom_score=0)
    assert proc["oomScoreAdj"] == 100  # raising needs no capability: left as asked


@pytest.mark.parametrize(("args", "want"), [
    (["--root", "/r", "create", "--bundle", "/b", "id"], ("/b/config.json", True)),
    (["run", "-b", "/b2", "id"], ("/b2/config.json", True)),
    (["exec", "--process", "/tmp/p.json", "id"], ("/tmp/p.json", False)),
    (["delete", "id"], None),
    (["exec", "id", "true"], None),
])
def test_the_spec_runc_will_read_is_found(args: list[str], want: tuple[str, bool] | None) -> None:
    got = capfilter.spec_file(args)
    assert (None if got is None else (str(got[0]), got[1])) == want


def test_as_a_program_it_edits_the_bundle_then_runs_runc_with_the_same_arguments(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    spec = {"ociVersion": "1.2.0", "process": _privileged_process(-998), "root": {"path": "rootfs"}}
    (bundle / "config.json").write_text(json.dumps(spec))
    record = tmp_path / "runc-call.json"
    fake = tmp_path / "runc"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"json.dump({{'argv': sys.argv[1:], 'spec': json.load(open({str(bundle / 'config.json')!r}))}}, "
                    f"open({str(record)!r}, 'w'))\n")
    fake.chmod(0o755)
    args = ["--root", str(tmp_path / "state"), "create", "--bundle", str(bundle), "ctr-1"]
    subprocess.run([sys.executable, capfilter.__file__, *args], check=True,
                   env={**os.environ, "GPU_CATALOG_RUNC": str(fake)})
    call = json.loads(record.read_text())
    assert call["argv"] == args
    # what this machine lacks is gone, nothing else changed
    missing = capfilter.missing_caps(capfilter.bounding_set(Path("/proc/self/status").read_text()))
    want = _privileged_process(-998)
    capfilter.fix_process(want, missing, int(Path("/proc/self/oom_score_adj").read_text()))
    assert call["spec"] == {**spec, "process": want}


def test_without_a_runc_it_exits_127_and_says_so(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, capfilter.__file__, "delete", "x"], capture_output=True, text=True,
                          env={"PATH": str(tmp_path)})
    assert proc.returncode == 127 and "no runc" in proc.stderr
