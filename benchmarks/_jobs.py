"""Transitional shim for the psf_* benchmark scripts (``subprocess_env``): the job helpers live in
:mod:`forethought.experiments.jobs`. Delete once those scripts import the package directly."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:  # as before: the psf scripts run this checkout's sources
    sys.path.insert(0, str(ROOT / "src"))

from forethought.experiments import jobs as _jobs  # noqa: E402


def subprocess_env(threads: int) -> dict[str, str]:
    return _jobs.subprocess_env(threads, ROOT / "src")
