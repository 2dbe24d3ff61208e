"""The smoke suite run as a program (python -m smoke) over mimic module trees, in subprocesses."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
for p in (ROOT, ROOT / "tests" / "unit" / "smoke"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
