"""Write a sample signed evidence folder (or use an existing one) and screenshot its HTML report.

    PYTHONPATH=$PWD python3 bench/report_screenshot.py --out out/report-sample
    PYTHONPATH=$PWD python3 bench/report_screenshot.py --evidence out/evidence   # a real run's folder

Prints the report and PNG paths and the time each step took.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from gpucatalog.pipelines import evidence, keys, sample, screenshot


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("out/report-sample"))
    ap.add_argument("--evidence", type=Path, help="an existing evidence folder to screenshot instead")
    args = ap.parse_args()
    if args.evidence:
        html = args.evidence / evidence.REPORT
    else:
        t0 = time.monotonic()
        suites = sample.run()
        with tempfile.TemporaryDirectory() as kd:
            k = keys.generate(Path(kd), "bench")
            statement = evidence.build_statement(
                bundle="gpu-scheduling", version="0.1.0", profile="sim", digest="sha256:" + "ab" * 32,
                cluster=sample.CLUSTER, tools={"helm": "v4.3.2", "kubernetes": "v1.36.3", "kwok": "v0.8.0"},
                suites=suites, started=time.time() - 60, finished=time.time(),
            )
            paths = evidence.write_evidence(args.out, statement, k.private_path)
        html = paths.report
        print(f"evidence written in {time.monotonic() - t0:.2f}s: {paths.envelope.parent}")
    t0 = time.monotonic()
    png = screenshot.screenshot(html, html.with_suffix(".png"))
    print(f"report:     {html}")
    print(f"screenshot: {png} ({png.stat().st_size} bytes, {time.monotonic() - t0:.1f}s)")


if __name__ == "__main__":
    main()
