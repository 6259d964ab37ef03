"""Transitional shim for the psf_* benchmark scripts (``invocations``): it lives in
:mod:`forethought.experiments`. Delete once those scripts import the package directly."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:  # as before: the psf scripts run this checkout's sources
    sys.path.insert(0, str(ROOT / "src"))

from forethought.experiments.archive import invocations  # noqa: E402, F401
