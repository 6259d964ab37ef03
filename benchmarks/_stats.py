"""Transitional shim: these helpers live in :mod:`forethought.experiments` (and PredGen's paired comparison in
``forethought.predgen.compare``). Kept until the benchmark scripts import the package directly."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from forethought.experiments.archive import (  # noqa: E402, F401
    finished_run,
    invocations,
    predictions,
    run_started,
    training_log,
)
from forethought.experiments.stats import gradient_summary  # noqa: E402, F401
from forethought.predgen.compare import paired  # noqa: E402, F401
