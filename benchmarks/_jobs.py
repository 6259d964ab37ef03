"""Transitional shim: the job queue lives in :mod:`forethought.experiments.jobs`. Kept until the benchmark
scripts import the package directly; here a failed job still ends the script with a message (SystemExit), and
jobs run this checkout's sources."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from forethought.experiments import jobs as _jobs  # noqa: E402


def subprocess_env(threads: int) -> dict[str, str]:
    return _jobs.subprocess_env(threads, ROOT / "src")


def run_queue(jobs: list[tuple[str, list[str]]], parallel: int, log_dir: Path, cwd: Path, threads: int = 1,
              on_done: Callable[[str], object] | None = None) -> None:
    """:func:`forethought.experiments.jobs.run_queue_or_exit`: a failure (the other jobs already stopped) exits."""
    _jobs.run_queue_or_exit(jobs, parallel, log_dir, cwd, threads=threads, on_done=on_done, poll_s=0.5,
                            src=ROOT / "src")
