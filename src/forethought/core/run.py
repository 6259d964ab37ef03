"""Run folders: ``runs/<name>/`` holds the resolved config, ``metrics.jsonl``, ``results.json``, checkpoints,
plots and ``env.json`` (git hash, package versions, command, the pretrained models loaded with their weights'
SHA-256), so every number can be traced to its run."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from forethought.core.config import field, save_yaml
from forethought.core.env import resolved_models
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_json, read_jsonl
from forethought.core.trackers import check_tracker

_PACKAGES = ("torch", "transformers", "peft", "accelerate", "tokenizers", "safetensors", "numpy")


def git_hash() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict[str, Any]:
    """What produced a result: command, machine, versions, git commit."""
    versions = {}
    for p in _PACKAGES:
        try:
            versions[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            versions[p] = None
    try:
        import torch

        threads = torch.get_num_threads()
        cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        threads, cuda = None, None
    import os

    return {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(), "torch_threads": threads, "gpu": cuda},
        "python": platform.python_version(),
        "packages": versions,
        "git": git_hash(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "models": resolved_models(),
    }


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of a run folder's metrics.jsonl ([] when it has none); a line torn by a kill is skipped."""
    return read_jsonl(Path(run_dir) / "metrics.jsonl")


@dataclass
class RunConfig:
    name: str = field("run", "run folder name under out_dir")
    out_dir: str = field("runs", "where run folders are written")
    seed: int = field(0, "random seed (data, init, sampling)")
    device: str = field("auto", "auto | cpu | cuda | mps")
    precision: Literal["fp32", "bf16", "fp16"] = field(
        "fp32", "training precision (accelerate's mixed precision): fp32, or bf16 / fp16 autocast of fp32 weights "
        "(fp16 adds a gradient scaler and needs a GPU; bf16 runs on the CPU too, slowly)")
    log_with: Literal["none", "tensorboard", "wandb"] = field(
        "none", "also send the metrics.jsonl rows to TensorBoard (<run>/tensorboard/) or Weights & Biases "
        "(accelerate's trackers; the package must be installed)")

    def validate(self) -> None:
        # the run folder is out_dir/name: '' or '..' would write into (or above) out_dir itself
        if self.name in ("", ".", "..") or Path(self.name).name != self.name:
            raise ForethoughtError(f"name must be a plain folder name (created under out_dir), got {self.name!r}")
        if not self.out_dir.strip():
            raise ForethoughtError("out_dir must name a folder ('.' = the current one)")
        check_tracker(self.log_with)


@dataclass
class Run:
    """A run folder. Only rank 0 writes (``is_main``).

    Nothing is written when a run is created: the folder, ``config.yaml`` and ``env.json`` appear when the run
    first writes something (a metric, a result, a plot, a checkpoint through the trainer). So a command that
    stops on bad input — a corrupt checkpoint, an unknown corpus, a bad setting found late — leaves no folder
    behind and does not touch an existing one. A sub-run (:meth:`sub`) holds its parent and starts it first.
    """

    dir: Path
    is_main: bool = True
    cfg: Any = None
    started: bool = False
    parent: Run | None = None  # the run whose folder holds this one (a recipe's stage, one variant of several)

    @classmethod
    def create(cls, root: str | Path, name: str, cfg: Any = None, is_main: bool = True) -> Run:
        return cls(Path(root) / name, is_main, cfg)

    def sub(self, name: str, cfg: Any = None) -> Run:
        """A run in a folder inside this one (``name`` may hold ``/``); starting it starts this run first."""
        return Run(self.dir / name, self.is_main, cfg, parent=self)

    def start(self) -> Run:
        """Create the folder and write config.yaml (resolved) and env.json, once (the parent's first)."""
        if self.started:
            return self
        self.started = True
        if self.parent is not None:
            self.parent.start()
        if self.is_main:
            self.dir.mkdir(parents=True, exist_ok=True)
            if self.cfg is not None:
                save_yaml(self.cfg, self.dir / "config.yaml")
            atomic_write_json(self.dir / "env.json", environment())
        return self

    def log(self, record: dict[str, Any]) -> None:
        """Append one JSON line to metrics.jsonl (lines are small, so an append is effectively atomic)."""
        if not self.is_main:
            return
        self.start()
        with open(self.dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    def metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.dir)

    def write_results(self, results: dict[str, Any]) -> Path:
        p = self.dir / "results.json"
        if self.is_main:
            self.start()
            self.note_models()
            atomic_write_json(p, results)
        return p

    def note_models(self) -> None:
        """Add to env.json the models loaded since it was written (a run may start writing before its model
        loads): the record names every model its process loaded (:func:`forethought.core.env.record_model`)."""
        env_path = self.dir / "env.json"
        models = resolved_models()
        if not self.is_main or not env_path.is_file():
            return
        try:
            env = json.loads(env_path.read_text())
        except ValueError:
            return  # not ours to repair: the record stays as it is
        if isinstance(env, dict) and env.get("models") != models:
            env["models"] = models
            atomic_write_json(env_path, env)

    def path(self, name: str) -> Path:
        """Where to write ``name`` in this run (starts the run: the caller is about to write there)."""
        self.start()
        return self.dir / name
