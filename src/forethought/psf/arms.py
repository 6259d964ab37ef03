"""Ablation arms on PSF: each arm is one ``forethought psf recipe`` run followed by ``forethought psf diagnose`` on
its folder, both as CLI subprocesses (the path a user runs), one at a time, resumable, with their wall times kept
beside the logs. The benchmarks that compare arms (benchmarks/psf_states_ablation.py, psf_codes_pilot.py) name
their arms and read the measures; this module runs and reads them.

Resuming: a recipe whose folder holds results.json is not run again (``retrain_unrecorded``: unless no wall
time of it was recorded; the recipe then runs with ``--resume auto`` and only records its time), and an arm
whose diagnose.json is newer than its results.json is not diagnosed again.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Arm:
    """One arm: its run folder and the two commands (argv lists, ``sys.executable -m forethought.cli ...``)."""

    run_dir: Path
    recipe: Sequence[str]
    diagnose: Sequence[str]

    def walls_path(self, logs: Path) -> Path:
        return logs / f"{self.run_dir.name}.walls.json"


def arm_parser(description: str, arms: Iterable[str], runs: Path, out: Path) -> argparse.ArgumentParser:
    """The options every arms benchmark takes: --arms (default: all), --runs, --out, --threads, --collect-only."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--arms", nargs="*", default=list(arms), help="arms to train and diagnose (default: all)")
    p.add_argument("--runs", default=str(runs))
    p.add_argument("--out", default=str(out))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--collect-only", action="store_true", help="only collect finished arms into the JSON")
    return p


def parse_arm_args(p: argparse.ArgumentParser, arms: Iterable[str], argv: list[str] | None) -> argparse.Namespace:
    """Parse, refusing an arm the benchmark does not define (argparse's one-line error, exit 2)."""
    args = p.parse_args(argv)
    unknown = [a for a in args.arms if a not in list(arms)]
    if unknown:
        p.error(f"unknown arm(s) {unknown}; choose from {list(arms)}")
    return args


def run_logged(argv: Sequence[str], log: Path, env: Mapping[str, str], cwd: Path) -> float:
    """Run ``argv`` with its output appended to ``log`` (after the command line); its wall time in seconds. A
    failure ends the script with one line naming the command and the log."""
    t0 = time.perf_counter()
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(argv)}\n")
        f.flush()
        proc = subprocess.run(list(argv), env=dict(env), stdout=f, stderr=subprocess.STDOUT, cwd=cwd, check=False)
    if proc.returncode:
        sys.exit(f"{' '.join(argv[2:6])} failed (exit {proc.returncode}); see {log}")
    return time.perf_counter() - t0


def read_walls(arm: Arm, logs: Path) -> dict[str, float]:
    path = arm.walls_path(logs)
    return json.loads(path.read_text()) if path.is_file() else {}


def train_and_diagnose(arm: Arm, logs: Path, env: Mapping[str, str], cwd: Path, *,
                       retrain_unrecorded: bool = False) -> None:
    """Train the arm's recipe unless finished, then diagnose it unless its diagnose.json is current; the wall
    times (``recipe_s``, summed over invocations, and ``diagnose_s``) go to ``<logs>/<run>.walls.json``."""
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{arm.run_dir.name}.log"
    walls = read_walls(arm, logs)
    results, diag = arm.run_dir / "results.json", arm.run_dir / "diagnose.json"
    if not results.is_file() or (retrain_unrecorded and "recipe_s" not in walls):
        walls["recipe_s"] = walls.get("recipe_s", 0.0) + run_logged(arm.recipe, log, env, cwd)
        arm.walls_path(logs).write_text(json.dumps(walls))
    if not diag.is_file() or diag.stat().st_mtime < results.stat().st_mtime:
        walls["diagnose_s"] = run_logged(arm.diagnose, log, env, cwd)
        arm.walls_path(logs).write_text(json.dumps(walls))


def read_arm(arm: Arm, logs: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, float]] | None:
    """A diagnosed arm's results.json, diagnose.json and recorded wall times (None when not diagnosed yet)."""
    if not (arm.run_dir / "diagnose.json").is_file():
        return None
    return (json.loads((arm.run_dir / "results.json").read_text()),
            json.loads((arm.run_dir / "diagnose.json").read_text()), read_walls(arm, logs))


def command_line(argv: Sequence[str], root: Path) -> str:
    """How a results file names a command: ``python -m forethought.cli ...`` with paths relative to ``root``."""
    return " ".join(["python", *argv[1:]]).replace(str(root) + "/", "")


def machine(threads: int) -> dict[str, Any]:
    """The machine and versions a benchmark's numbers were measured on."""
    import torch

    return {"platform": platform.platform(), "processor": platform.processor(), "cpu_count": os.cpu_count(),
            "torch": torch.__version__, "python": platform.python_version(), "threads": threads}


def run_arms(train: Iterable[str], every: Iterable[str], train_and_diagnose: Callable[[str], None],
             collect: Callable[[str], dict[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """Train and diagnose the arms ``train`` (in order), then collect every arm of ``every`` that is diagnosed
    (also those of earlier invocations), in ``every``'s order."""
    for arm in train:
        train_and_diagnose(arm)
    return {a: r for a in every if (r := collect(a)) is not None}


def write_results(path: str | Path, out: dict[str, Any]) -> None:
    """A benchmark's results JSON (indent 1, trailing newline), its folder created."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1) + "\n")
