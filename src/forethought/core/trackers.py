"""Experiment trackers (TensorBoard, Weights & Biases) through accelerate's trackers, off by default: every row
the trainer writes to ``metrics.jsonl`` is also sent to the tracker, with the same names and values. The
tracker's package is imported by accelerate only when it is used; a missing one is an error when the config is
read, before anything is written."""

from __future__ import annotations

import importlib.util
from typing import Any

from forethought.core.errors import ForethoughtError

TRACKERS = ("none", "tensorboard", "wandb")
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}  # log_with -> the package accelerate imports


def check_tracker(log_with: str) -> None:
    """One clear line when ``log_with`` names a tracker whose package is not installed (accelerate would skip it
    silently)."""
    if log_with not in TRACKERS:
        raise ForethoughtError(f"unknown tracker '{log_with}' (choose from {', '.join(TRACKERS)})")
    package = PACKAGES.get(log_with)
    if package is not None and importlib.util.find_spec(package) is None:
        raise ForethoughtError(f"log_with {log_with} needs the {package} package, which is not installed: "
                               f"pip install {package}")


def start_trackers(acc: Any, run_dir: str, name: str, config: dict[str, Any] | None) -> bool:
    """Start the accelerator's trackers (if it has any) for one run folder: TensorBoard writes
    ``<run_dir>/tensorboard/``, W&B a run named ``name``. Returns whether any tracker runs."""
    if not acc.log_with:
        return False
    acc.project_configuration.logging_dir = run_dir
    kinds = {str(t) for t in acc.log_with}
    acc.init_trackers("tensorboard" if "tensorboard" in kinds else "forethought", config=flat_config(config),
                      init_kwargs={"wandb": {"name": name, "dir": run_dir}})
    return True


def log_row(acc: Any, row: dict[str, Any]) -> None:
    """Send one metrics.jsonl row (``step`` and its numbers; the ``eval`` flag marks evaluation rows) to the
    trackers (accelerate logs on the main process only)."""
    if acc.trackers:
        acc.log({k: v for k, v in row.items() if k not in ("step", "eval")}, step=int(row["step"]))


def stop_trackers(acc: Any) -> None:
    """Finish this run's trackers (not ``end_training``, which would also end the process group)."""
    for tracker in acc.trackers:
        tracker.finish()
    acc.trackers.clear()


def flat_config(config: dict[str, Any] | None, prefix: str = "") -> dict[str, Any] | None:
    """A nested config as dotted keys with numbers, strings and booleans (what TensorBoard's hparams accept)."""
    if config is None:
        return None
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update(flat_config(v, f"{prefix}{k}.") or {})
        else:
            out[f"{prefix}{k}"] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out
