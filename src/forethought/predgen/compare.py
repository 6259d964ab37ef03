"""``forethought predgen compare``: two PredGen runs (or one run's two answers, or two points of one run's learning
curve) on the same evaluation examples, paired: the accuracy difference with its paired bootstrap 95 % interval
and McNemar's exact test, or the MSE and Pearson differences with paired bootstrap intervals.

A side is a run folder (its final ``predictions.jsonl``, or with ``step`` the curve point's
``curve_predictions/step-NNNNNN.jsonl``) or a predictions JSONL that ``predgen train | eval`` wrote
(rows: id, prediction, decoded, target; ``predict``'s files have no targets). Rows are matched by id; both
sides must hold the same examples.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_json
from forethought.eval.paired import paired as paired_rows
from forethought.eval.paired import task_type_of  # noqa: F401 (re-exported)
from forethought.predgen.config import AnswerKey, CompareConfig  # noqa: F401 (its home imports no numpy)
from forethought.predgen.tasks.readers import jsonl_rows

CURVE_DIR = "curve_predictions"
WHO_WRITES = {"decoded": "a Predictor's run writes no 'decoded' (its answer is not generated)",
              "expected_value": "only a regression run evaluated with --eval.decoder expected writes it",
              "rank": "only a classification run evaluated with --eval.decoder rank writes it",
              "rank_norm": "only a classification run evaluated with --eval.decoder rank writes it"}


def paired(rows_a: list[dict], rows_b: list[dict], task_type: str = "classification", key_a: str = "prediction",
           key_b: str = "prediction", n_boot: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """:func:`forethought.eval.paired.paired` with PredGen's hints on who writes which answer."""
    return paired_rows(rows_a, rows_b, task_type, key_a, key_b, n_boot, seed, who_writes=WHO_WRITES)


def curve_predictions_path(run_dir: Path, step: int) -> Path:
    """Where ``predgen train --train.eval_every`` keeps the predictions of its curve point at ``step``."""
    return run_dir / CURVE_DIR / f"step-{step:06d}.jsonl"


def read_side(source: str, step: int) -> tuple[Path, list[dict]]:
    """The predictions file a side names, and its rows."""
    if not source:
        raise ForethoughtError("give both sides: --a RUN_OR_FILE --b RUN_OR_FILE")
    src = Path(source)
    if src.is_dir():
        path = curve_predictions_path(src, step) if step else src / "predictions.jsonl"
        if not path.is_file():
            if step:
                kept = sorted(int(p.stem.removeprefix("step-")) for p in (src / CURVE_DIR).glob("step-*.jsonl")
                              if p.stem.removeprefix("step-").isdigit())
                raise ForethoughtError(f"{src} has no curve predictions at step {step}"
                                       + (f" (it has steps {', '.join(map(str, kept))})" if kept else
                                          " (train it with --train.eval_every to keep them)"))
            raise ForethoughtError(f"{src} has no predictions.jsonl (is it a finished 'predgen train' run?)")
    elif src.is_file():
        if step:
            raise ForethoughtError(f"--step_* picks a curve point of a run folder, but {src} is a file")
        path = src
    else:
        raise ForethoughtError(f"no such run folder or predictions file: {src}")
    rows = []
    for k, row in jsonl_rows(path):
        if "id" not in row:
            raise ForethoughtError(f"{path} line {k} is not a predictions row (it needs an id)")
        rows.append(row)
    if not rows:
        raise ForethoughtError(f"{path} holds no predictions")
    return path, rows


def run_compare(cfg: CompareConfig, resume: str | None = None) -> dict[str, Any]:
    cfg.validate()
    path_a, rows_a = read_side(cfg.a, cfg.step_a)
    path_b, rows_b = read_side(cfg.b, cfg.step_b)
    kind_a, kind_b = task_type_of(rows_a), task_type_of(rows_b)
    if kind_a != kind_b:
        raise ForethoughtError(f"A's targets are a {kind_a} task's, B's a {kind_b} task's")
    out = {"a": {"predictions": str(path_a), "key": cfg.key_a, "step": cfg.step_a or None},
           "b": {"predictions": str(path_b), "key": cfg.key_b, "step": cfg.step_b or None},
           "task_type": kind_a, "n_boot": cfg.n_boot, "seed": cfg.seed,
           **paired(rows_a, rows_b, kind_a, cfg.key_a, cfg.key_b, cfg.n_boot, cfg.seed)}
    if cfg.out:
        atomic_write_json(Path(cfg.out), out)
    print(summary(out))
    return out


def summary(res: dict[str, Any]) -> str:
    """The comparison in a few lines: A − B, the 95 % interval, McNemar (classification)."""
    def side(s: dict) -> str:
        return f"{s['predictions']} [{s['key']}{', step ' + str(s['step']) if s['step'] else ''}]"

    lines = [f"A = {side(res['a'])}", f"B = {side(res['b'])}", f"{res['n']} paired examples"]
    if res["task_type"] == "classification":
        lo, hi = res["ci95"]
        m = res["mcnemar"]
        lines.append(f"accuracy A − B: {res['difference']:+.4f}, paired bootstrap 95 % interval "
                     f"[{lo:+.4f}, {hi:+.4f}]; McNemar exact p = {m['p_value']:.3g} "
                     f"(A only right {m['b']}, B only right {m['c']})")
    else:
        for name in ("mse", "pearson"):
            r = res[name]
            lo, hi = r["ci95"]
            shown = "nan" if math.isnan(lo) else f"[{lo:+.4f}, {hi:+.4f}]"
            lines.append(f"{name} A − B: {r['difference']:+.4f} (A {r['a']:.4f}, B {r['b']:.4f}), paired bootstrap "
                         f"95 % interval {shown}")
    return "\n".join(lines)
