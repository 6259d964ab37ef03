"""Helpers the benchmark scripts share: a run folder's start time and predictions, a committed archive of finished
runs. Paired comparisons of predictions are the CLI's own (``forethought.predgen.compare.paired``, re-exported)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from forethought.predgen.compare import paired  # noqa: F401 - the benchmarks import it from here


def run_started(run_dir: Path) -> float | None:
    """When a run folder's run started (epoch seconds, from its env.json), or None when it has none."""
    env = run_dir / "env.json"
    if not env.is_file():
        return None
    return time.mktime(time.strptime(json.loads(env.read_text())["started"][:19], "%Y-%m-%dT%H:%M:%S"))


def predictions(run_dir: Path) -> list[dict]:
    """A PredGen run's eval-split predictions (predictions.jsonl rows: id, prediction, decoded, target)."""
    return [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]


def training_log(run_dir: Path) -> list[dict]:
    """The training rows of a run's metrics.jsonl (loss, lr, the logged losses' parts, grad_norm_<group>)."""
    from forethought.core.run import read_metrics

    return [r for r in read_metrics(run_dir) if not r.get("eval")]


def gradient_summary(log: list[dict]) -> dict[str, float] | None:
    """Medians over the logged steps of the second half of training: each logged loss part (l_w, l_d) and group
    gradient norm (grad_norm_writer, grad_norm_head, before clipping), and the head / writer norm ratio; None
    when the log has no gradient norms (a run archived before they were kept)."""
    import statistics

    last = max((r["step"] for r in log), default=0)
    late = [r for r in log if r["step"] > last / 2 and "grad_norm_writer" in r]
    if not late:
        return None
    keys = [k for k in ("l_w", "l_d", "grad_norm_writer", "grad_norm_head") if all(k in r for r in late)]
    out = {k: statistics.median(r[k] for r in late) for k in keys}
    if "grad_norm_head" in keys:
        out["head_over_writer"] = statistics.median(r["grad_norm_head"] / r["grad_norm_writer"] for r in late
                                                    if r["grad_norm_writer"] > 0)
    out["logged_steps"] = len(late)
    return out


def finished_run(run_dir: Path, archive: Path) -> dict | None:
    """A finished PredGen run's record (``results``, eval ``predictions``, ``command``, ``started``, ``finished``,
    ``train_log``: :func:`training_log`, ``torch_threads``), or None when it has not finished. Read from its run
    folder when that holds a finished run, and then saved as ``archive/<run name>.json`` (a committed folder: run
    folders live in ``runs/``, which a later session on a fresh machine does not have, and a benchmark may take
    several sessions); else read from the archive."""
    saved = archive / f"{run_dir.name}.json"
    if (run_dir / "results.json").is_file():
        env = json.loads((run_dir / "env.json").read_text())
        record = {"results": json.loads((run_dir / "results.json").read_text()), "predictions": predictions(run_dir),
                  "command": env["command"],
                  "started": run_started(run_dir), "finished": (run_dir / "results.json").stat().st_mtime,
                  "train_log": training_log(run_dir),
                  "torch_threads": env.get("machine", {}).get("torch_threads")}
        text = json.dumps(record, separators=(",", ":")) + "\n"
        if not saved.is_file() or saved.read_text() != text:
            from forethought.core.io import atomic_write_text

            archive.mkdir(parents=True, exist_ok=True)
            atomic_write_text(saved, text)
        return record
    return json.loads(saved.read_text()) if saved.is_file() else None


def invocations(runs_dir: Path, command: str) -> list[str]:
    """Every command that has worked on this benchmark's run folder, ``command`` added once (a benchmark may
    span several invocations; its JSON names them all)."""
    log = runs_dir / "invocations.txt"
    seen = log.read_text().splitlines() if log.is_file() else []
    if command not in seen:
        seen.append(command)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("\n".join(seen) + "\n")
    return seen
