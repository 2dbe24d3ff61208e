"""The README's smoke table, made from this folder's reports:  python3 table.py  (prints it).

One row per check: its status at the GPU tier and at the build tier, and the GPU tier's summary (or
the build tier's, for a check of the build tier only). tests/unit/smoke/test_smoke_h200_hopper.py
checks that README.md holds exactly this table.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
CUT = 260


def _short(text: str) -> str:
    text = " ".join(text.replace("|", "/").split())
    return text if len(text) <= CUT else text[: CUT - 1].rstrip() + "…"


def table(folder: Path = HERE) -> str:
    gpu = json.loads((folder / "report-gpu.json").read_text())
    build = json.loads((folder / "report-build.json").read_text())
    by_build = {c["name"]: c for c in build["checks"]}
    rows = ["| check | GPU tier | build tier | what the suite said (GPU tier; build tier where it alone checks) |",
            "|---|---|---|---|"]
    for c in gpu["checks"]:
        b = by_build.get(c["name"])
        said = c if not c.get("deferred") or b is None else b
        rows.append(f"| {c['name']} | {c['status']} | {b['status'] if b else '-'} | {_short(said['summary'])} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(table(), end="")
