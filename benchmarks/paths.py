"""The repository's root, put on ``sys.path`` so that a benchmark script run from anywhere
imports the project (standard library only: importable before torch)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
