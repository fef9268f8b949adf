"""Convert NVIDIA's XID catalog (CSV export of ``Xid-Catalog.xlsx``) into the package data file
``gpuhealth/data/xid_catalog.json`` that :mod:`gpucatalog.gpuhealth.xidpolicy` loads at runtime.

Run by a developer when NVIDIA publishes a new catalog; a test checks that the committed JSON
matches the CSV, so the data is never hand-copied::

    python3 -m gpucatalog.gpuhealth.gen_xid_data /work/shared/data/xid-catalog.csv
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "data" / "xid_catalog.json"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def convert(csv_path: Path) -> dict[str, Any]:
    """Read the catalog CSV and keep what the agent needs per XID code."""
    codes: dict[str, dict[str, str]] = {}
    with csv_path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            code = row["xid"].strip()
            if not code.isdigit():
                continue
            codes[code] = {
                "mnemonic": _one_line(row["mnemonic"]),
                "description": _one_line(row["description"]),
                "immediate": _one_line(row["recommended_action"]),
                "investigatory": _one_line(row["investigatory_action"]),
            }
    return {
        "source": "NVIDIA Xid-Catalog.xlsx (sheet Xids), via " + csv_path.name,
        "codes": dict(sorted(codes.items(), key=lambda kv: int(kv[0]))),
    }


def render(csv_path: Path) -> str:
    return json.dumps(convert(csv_path), indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python3 -m gpucatalog.gpuhealth.gen_xid_data XID_CATALOG.csv", file=sys.stderr)
        return 2
    OUT.write_text(render(Path(args[0])), encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
