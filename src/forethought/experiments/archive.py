"""Finished runs as JSON records, and the committed archive that keeps them.

Run folders live in ``runs/`` (ignored by git, absent on a fresh machine) and a benchmark may take several
sessions, so each finished run is read into one record and saved as ``<archive>/<run name>.json`` (for the
benchmarks ``benchmarks/results/runs/<benchmark>/``, committed). Collection then reads the run folder when it is
there and the archive otherwise, and gives the same JSON either way.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from forethought.core.io import atomic_write_text, read_jsonl
from forethought.core.run import read_metrics


def run_started(run_dir: Path) -> float | None:
    """When a run folder's run started (epoch seconds, from its env.json), or None when it has none."""
    env = Path(run_dir) / "env.json"
    if not env.is_file():
        return None
    return time.mktime(time.strptime(json.loads(env.read_text())["started"][:19], "%Y-%m-%dT%H:%M:%S"))


def predictions(run_dir: Path) -> list[dict[str, Any]]:
    """A run's eval-split predictions (predictions.jsonl rows, e.g. PredGen's id, prediction, decoded, target)."""
    return read_jsonl(Path(run_dir) / "predictions.jsonl")


def training_log(run_dir: Path) -> list[dict[str, Any]]:
    """The training rows of a run's metrics.jsonl (loss, lr, the logged losses' parts, grad_norm_<group>)."""
    return [r for r in read_metrics(run_dir) if not r.get("eval")]


def _key(file: str) -> str:
    """A run file's key in its record: ``results.json`` -> ``results``, ``eval/results.json`` -> ``eval/results``."""
    return file.removesuffix(".json")


def run_record(run_dir: Path, files: tuple[str, ...] | list[str] = ("results.json",)) -> dict[str, Any]:
    """A finished run folder as one record: each of ``files`` (JSON, relative to the folder; those present) under
    its name without ``.json`` (``results``, ``diagnose``, ``eval/results``), ``predictions`` (when it wrote
    predictions.jsonl), ``command``, ``started``, ``finished`` (epoch seconds: when the first file was written),
    ``train_log`` (:func:`training_log`), ``torch_threads``, ``models`` (the resolved pretrained models of
    env.json, when it names any), ``env`` (machine, Python, package versions, git commit) and ``config`` (its
    config.yaml, when it has one)."""
    run_dir = Path(run_dir)
    env = json.loads((run_dir / "env.json").read_text())
    record: dict[str, Any] = {}
    for f in files:
        if (run_dir / f).is_file():
            record[_key(f)] = json.loads((run_dir / f).read_text())
    if (run_dir / "predictions.jsonl").is_file():
        record["predictions"] = predictions(run_dir)
    record.update({"command": env["command"], "started": run_started(run_dir),
                   "finished": max((run_dir / f).stat().st_mtime for f in files if (run_dir / f).is_file()),
                   "train_log": training_log(run_dir), "torch_threads": env.get("machine", {}).get("torch_threads")})
    if env.get("models"):
        record["models"] = env["models"]
    record["env"] = {k: env.get(k) for k in ("machine", "python", "packages", "git")}
    if (run_dir / "config.yaml").is_file():  # the settings as run (a later collect may need the model section)
        record["config"] = yaml.safe_load((run_dir / "config.yaml").read_text())
    return record


def finished_run(run_dir: Path, archive: Path, files: tuple[str, ...] | list[str] = ("results.json",)
                 ) -> dict[str, Any] | None:
    """A finished run's record (:func:`run_record` of ``files``), or None when it has not finished. Read from its
    run folder when that holds every one of ``files``, and then saved as ``archive/<run name>.json`` (rewritten
    only when it changed); else read from the archive."""
    run_dir, archive = Path(run_dir), Path(archive)
    saved = archive / f"{run_dir.name}.json"
    if all((run_dir / f).is_file() for f in files):
        record = run_record(run_dir, files)
        text = json.dumps(record, separators=(",", ":")) + "\n"
        if not saved.is_file() or saved.read_text() != text:
            archive.mkdir(parents=True, exist_ok=True)
            atomic_write_text(saved, text)
        return record
    return json.loads(saved.read_text()) if saved.is_file() else None


def collect_runs(runs_dir: Path, names: list[str], archive: Path) -> dict[str, dict[str, Any]]:
    """The finished runs among ``names`` (run folders under ``runs_dir``, else their archived records), by name;
    unfinished ones are left out."""
    out = {}
    for name in names:
        record = finished_run(Path(runs_dir) / name, archive)
        if record is not None:
            out[name] = record
    return out


def finished_runs(runs_dir: Path, archive: Path, pattern: str) -> dict[str, dict[str, Any]]:
    """Every finished run whose name matches the glob ``pattern``, found as a run folder under ``runs_dir`` or as
    an archived record (a fresh machine has only the archive), by name in sorted order; see :func:`collect_runs`."""
    names = {d.name for d in Path(runs_dir).glob(pattern) if d.is_dir()}
    names |= {f.stem for f in Path(archive).glob(f"{pattern}.json")}
    return collect_runs(runs_dir, sorted(names), archive)


def span_s(records: dict[str, dict[str, Any]]) -> float:
    """Wall time of a benchmark from its records: the last run's finish minus the first run's start (0 without
    records); the same from the run folders or the archive alone."""
    starts = [r["started"] for r in records.values() if r.get("started") is not None]
    ends = [r["finished"] for r in records.values() if r.get("finished") is not None]
    return max(ends) - min(starts) if starts and ends else 0.0


def invocations(runs_dir: Path, command: str) -> list[str]:
    """Every command that has worked on a benchmark, ``command`` added once (a benchmark may span several
    invocations; its JSON names them all). Kept as ``invocations.txt`` in ``runs_dir`` (give the committed archive
    folder to keep the list on a fresh machine)."""
    log = Path(runs_dir) / "invocations.txt"
    seen = log.read_text().splitlines() if log.is_file() else []
    if command not in seen:
        seen.append(command)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("\n".join(seen) + "\n")
    return seen
