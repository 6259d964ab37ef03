"""Run benchmark commands as subprocesses, a few at a time, single-threaded each (2 cores -> 2 at once)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def subprocess_env(threads: int) -> dict[str, str]:
    """The environment of every benchmark subprocess: ``threads`` torch threads, this checkout's sources first on
    PYTHONPATH (so a run uses the code of the checkout that launched it), the offline hub unless set."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT / "src") + (os.pathsep + path if path else ""),
            "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}


def run_queue(jobs: list[tuple[str, list[str]]], parallel: int, log_dir: Path, cwd: Path, threads: int = 1,
              on_done: Callable[[str], object] | None = None) -> None:
    """Run ``(name, argv)`` jobs in order, ``parallel`` at a time, each logging to ``log_dir/<name>.log`` with
    ``threads`` torch threads; ``on_done(name)`` after each job that succeeds (e.g. archive its run at once, so
    a script killed later keeps it). Stops the script (exit message) when a job fails."""
    env = subprocess_env(threads)
    log_dir.mkdir(parents=True, exist_ok=True)
    pending = list(jobs)
    running: list[tuple[str, subprocess.Popen]] = []
    while pending or running:
        while pending and len(running) < parallel:
            name, argv = pending.pop(0)
            log = open(log_dir / f"{name}.log", "a")
            running.append((name, subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)))
        time.sleep(2)
        for name, proc in list(running):
            if proc.poll() is not None:
                running.remove((name, proc))
                if proc.returncode != 0:
                    sys.exit(f"{name} failed (exit {proc.returncode}); see {log_dir / (name + '.log')}")
                if on_done is not None:
                    on_done(name)
