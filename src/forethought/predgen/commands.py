"""``forethought predgen train | eval | predict``: fine-tune an HF causal LM with one of the three methods, then
evaluate it, or predict on new inputs with a saved model.

``train`` writes the run folder (config, metrics, checkpoints for ``--resume auto``), the saved model
(``<run>/model/``: peft adapter or full weights, the head, ``predgen.json`` with the record of the run's split),
the evaluation (``results.json``), the eval-split predictions (``predictions.jsonl``) and ``report.md``. With
``--train.eval_every N`` it also evaluates every N steps (and at the last step) on the evaluation examples
(``--task.max_eval_examples`` of the eval split, seeded; all of it when 0): ``results.json["learning_curve"]``
and ``learning_curve.png``, and each point's predictions in ``curve_predictions/``. Every input is checked
before the run folder is written.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from forethought.core.env import run_models
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_json, atomic_write_text
from forethought.core.plots import pyplot, save_figure
from forethought.core.precision import base_dtype
from forethought.core.run import Run
from forethought.core.runtime import mix_seed, runtime_for, unwrap
from forethought.core.trainer import TrainHooks, train
from forethought.predgen.compare import curve_predictions_path
from forethought.predgen.config import (  # their home imports no torch; the names also resolve here
    EvalConfig,
    EvalSettings,
    PredGenConfig,
    PredictConfig,
    adapter_name,
    with_task_defaults,
)
from forethought.predgen.data import load_splits, split_record
from forethought.predgen.methods import (
    Encoder,
    Predictions,
    agreement,
    predict,
    sampling_p,
    training_loss,
    with_sampling,
)
from forethought.predgen.metrics import classification_metrics, regression_metrics
from forethought.predgen.model import (
    PredGenModel,
    apply_adapter,
    build_head,
    check_layer,
    hidden_size,
    save_model,
    vocab_size,
)
from forethought.predgen.registry import Method, method_named
from forethought.predgen.saved import load_saved, saved_examples
from forethought.predgen.tasks import read_inputs

# ----------------------------------------------------------------------------------------------------------
# train
# ----------------------------------------------------------------------------------------------------------


@run_models()  # env.json names the models this run loads, not an earlier run's
def run_train(cfg: PredGenConfig, resume: str | None = None) -> dict[str, Any]:
    from forethought.models.hf import load_causal_lm

    cfg = with_task_defaults(cfg)
    method = method_named(cfg.method)
    dtype = base_dtype(cfg.base_dtype, cfg.run.precision, trains_base=cfg.adapter.method == "full")
    rt = runtime_for(cfg.run)
    spec, train_ex, val_ex, eval_ex = load_splits(cfg.task, cfg.run.seed)  # eval: fixed by the split seed
    check_task_settings(cfg, spec)
    lm, tok = load_causal_lm(cfg.base, dtype=dtype, trust_remote_code=cfg.trust_remote_code)
    check_layer(cfg.layer, lm)
    enc = Encoder(spec, tok, cfg.prompt, decode=method.decodes)
    eval_items = enc.encode(eval_ex)
    val_items = enc.encode(val_ex)  # selection happens here, never on the eval split
    if not method.trains:
        return zero_shot(cfg, method, enc, PredGenModel(lm, None), eval_items, val_items, len(train_ex), rt)
    encoded: dict[int, dict[str, Any]] = {}  # training examples are tokenised when first drawn (SST-2: 67k)

    def train_item(i: int) -> dict[str, Any]:
        if i not in encoded:
            encoded[i] = enc.encode([train_ex[i]])[0]
        return encoded[i]

    torch.manual_seed(cfg.run.seed)  # adapter and head initialisation
    lm = apply_adapter(lm, cfg.adapter, cfg.train.steps)
    bias = None
    if spec.task_type == "regression":
        bias = statistics.fmean(float(enc.target(ex)) for ex in train_ex)
    pooling = method.pooling(cfg.head.pooling)
    head = build_head(method, hidden_size(lm), enc.n_out, pooling, cfg.head.hidden, bias, cfg.head.reads,
                      vocab_size(lm), cfg.head.choice_alpha, cfg.head.choice_loglik)
    model = PredGenModel(lm, head)
    run = Run.create(cfg.run.out_dir, cfg.run.name, cfg, is_main=rt.is_main)
    n, bs = len(train_ex), cfg.train.batch_size

    def batch_fn(step: int) -> dict[str, Any]:
        # Epoch-wise seeded permutations: every method sees the same examples in the same order.
        picks = []
        for pos in range(step * bs, (step + 1) * bs):
            epoch, k = divmod(pos, n)
            perm = _perm(n, cfg.run.seed, epoch)  # lru-cached
            picks.append(train_item(perm[k]))
        return with_sampling(enc.collate(picks), sampling_p(cfg.predgen, step, cfg.train.steps),
                             mix_seed("predgen-sampling", cfg.run.seed, step))

    task_type = spec.task_type
    loss_fn = training_loss(method, cfg, enc)

    after_step = None
    if cfg.adapter.method == "adalora":
        def after_step(m: Any, step: int) -> None:  # AdaLoRA's rank allocation needs the gradients of each step
            unwrap(m).lm.base_model.update_and_allocate(step)

    eval_fn = None
    if cfg.train.eval_every > 0:
        eval_fn = curve_eval_fn(method, enc, val_items or eval_items, cfg.eval.batch_size, cfg.layer, rt.device,
                                run.dir if rt.is_main else None)
    # the writer (the LM's adapter) and the head's gradient norms: WDAL's forms scale them differently
    groups = {"writer": [p for p in model.lm.parameters() if p.requires_grad]}
    if model.head is not None:
        groups["head"] = [p for p in model.head.parameters() if p.requires_grad]
    scales = {id(p): cfg.head.lr_scale for p in groups.get("head", [])} if cfg.head.lr_scale != 1.0 else None
    out = train(model, loss_fn, batch_fn, cfg.train, run, rt, resume=resume, desc=f"predgen {cfg.method}",
                hooks=TrainHooks(after_step=after_step, eval_fn=eval_fn, grad_groups=groups, lr_scales=scales))
    results: dict[str, Any] = {"method": cfg.method, "task": spec.name, "base": cfg.base,
                               "adapter": dataclasses.asdict(cfg.adapter), "steps": cfg.train.steps,
                               "batch_size": bs, "train_examples": n, "eval_examples": len(eval_items),
                               "train_wall_s": out["wall_s"], "final_loss": out.get("final_loss"),
                               "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
                               "seed": cfg.run.seed, "val_examples": len(val_items)}
    if method.answers_twice:  # what its prediction is: T(Z) in one of its forms, or the likelihood variant
        results["prediction_by"] = adapter_name(cfg.head.reads, cfg.head.choice_loglik)
    if out.get("eval_curve"):
        results["learning_curve"] = learning_curve(out["eval_curve"], bs)
        results["learning_curve_split"] = "validation" if val_items else "eval"
    if rt.is_main:
        meta = {"method": cfg.method, "base": cfg.base, "task_spec": dataclasses.asdict(spec),
                "prompt": dataclasses.asdict(cfg.prompt), "layer": cfg.layer, "n_out": enc.n_out,
                "head": {"pooling": pooling, "hidden": cfg.head.hidden, "reads": cfg.head.reads,
                         "choice_loglik": cfg.head.choice_loglik},
                "data": split_record(cfg.task, cfg.run.seed, train_ex, eval_ex, val_ex)}
        save_model(model, tok, run.dir / "model", meta, cfg.adapter)
        model.to(rt.device)
        evaluate_validation(model, method, enc, val_items, cfg, rt.device, run.dir, results)
        metrics, preds = evaluate(model, method, enc, eval_items, cfg.eval, cfg.layer, rt.device)
        results.update(metrics)
        write_predictions(run.dir / "predictions.jsonl", enc, eval_items, preds)
        if "learning_curve" in results:
            plot_learning_curve(results["learning_curve"], task_type, bs, run.path("learning_curve.png"),
                                results["learning_curve_split"])
        run.write_results(results)
        atomic_write_text(run.path("report.md"), train_report(run.dir.name, results))
        print(json.dumps({k: v for k, v in results.items() if not isinstance(v, (dict, list))}, indent=1))
    return results


def check_task_settings(cfg: PredGenConfig, spec: Any) -> None:
    """The settings that depend on the task's kind, checked once it is loaded (before the model is)."""
    if spec.task_type != "classification":
        if cfg.eval.decoder == "rank":
            raise ForethoughtError(f"eval.decoder rank ranks a classification task's choices; '{spec.name}' is a "
                                   "regression task (use eval.decoder expected)")
        if cfg.head.reads != "states":
            raise ForethoughtError(f"head.reads {cfg.head.reads} gives class scores; '{spec.name}' is a regression "
                                   "task (use head.reads states)")


def evaluate_validation(model: PredGenModel, method: Method, enc: Encoder, items: list[dict[str, Any]],
                        cfg: PredGenConfig, device: Any, run_dir: Path, results: dict[str, Any]) -> None:
    """The validation split's metrics (``results["validation"]``, the numbers to select on) and predictions
    (``validation_predictions.jsonl``, for paired selection with ``predgen compare``); nothing without one."""
    if not items:
        return
    es = dataclasses.replace(cfg.eval, latency_examples=0)
    metrics, preds = evaluate(model, method, enc, items, es, cfg.layer, device)
    results["validation"] = {k: v for k, v in metrics.items() if k not in ("examples_per_s", "eval_batch_size")}
    write_predictions(run_dir / "validation_predictions.jsonl", enc, items, preds)


def zero_shot(cfg: PredGenConfig, method: Method, enc: Encoder, model: PredGenModel, eval_items: list[dict[str, Any]],
              val_items: list[dict[str, Any]], n_train: int, rt: Any) -> dict[str, Any]:
    """A method that trains nothing (``--method base``): the untrained base model evaluated as it predicts (base:
    its greedy answer under each example's choices; with ``--eval.decoder rank`` the log-likelihood ranking),
    nothing trained or saved."""
    run = Run.create(cfg.run.out_dir, cfg.run.name, cfg, is_main=rt.is_main)
    results: dict[str, Any] = {"method": method.name, "task": enc.spec.name, "base": cfg.base,
                               "adapter": dataclasses.asdict(cfg.adapter), "steps": 0, "batch_size": 0,
                               "train_examples": n_train, "eval_examples": len(eval_items), "train_wall_s": 0.0,
                               "final_loss": None, "trainable_params": 0, "seed": cfg.run.seed,
                               "val_examples": len(val_items)}
    if rt.is_main:
        model.to(rt.device)
        evaluate_validation(model, method, enc, val_items, cfg, rt.device, run.dir, results)
        metrics, preds = evaluate(model, method, enc, eval_items, cfg.eval, cfg.layer, rt.device)
        results.update(metrics)
        write_predictions(run.dir / "predictions.jsonl", enc, eval_items, preds)
        run.write_results(results)
        atomic_write_text(run.path("report.md"), train_report(run.dir.name, results))
        print(json.dumps({k: v for k, v in results.items() if not isinstance(v, (dict, list))}, indent=1))
    return results


@functools.lru_cache(maxsize=4)
def _perm(n: int, seed: int, epoch: int) -> list[int]:
    g = torch.Generator().manual_seed(mix_seed("predgen-perm", seed, epoch))
    return torch.randperm(n, generator=g).tolist()


# ----------------------------------------------------------------------------------------------------------
# the learning curve and the report
# ----------------------------------------------------------------------------------------------------------


def curve_eval_fn(method: Method | str, enc: Encoder, items: list[dict[str, Any]], batch_size: int, layer: int,
                  device: torch.device | str, run_dir: Path | None = None) -> Callable[[Any, int], dict[str, float]]:
    """The trainer's ``eval_fn``: the metrics of the method's prediction on ``items`` (the run's evaluation
    examples, so the last point equals the final evaluation); PredGen's also of its decoded answer
    (``decoded_<metric>``), which the same pass produced: the adapter and the answer it read can learn at
    different rates. ``method``: the object or its name. With ``run_dir`` each point's predictions are kept too
    (``curve_predictions/step-NNNNNN.jsonl``), so two points can be compared paired (``predgen compare``)."""
    method = method_named(method)

    def fn(model: Any, step: int) -> dict[str, float]:
        preds = predict(model, method, enc, items, batch_size, layer, False, device)
        if run_dir is not None:
            write_predictions(curve_predictions_path(run_dir, step), enc, items, preds)
        out = score(enc, items, preds.prediction)
        if method.answers_twice:  # its decoded answer is scored beside the head's prediction
            out.update({f"decoded_{k}": v for k, v in score(enc, items, preds.decoded).items()})
        return out

    return fn


def learning_curve(evals: list[dict[str, float]], batch_size: int) -> list[dict[str, float]]:
    """The trainer's evaluation rows with the examples seen so far (step × global batch size)."""
    return [{"step": int(r["step"]), "examples_seen": int(r["step"]) * batch_size,
             **{k: v for k, v in r.items() if k != "step"}} for r in evals]


def plot_learning_curve(curve: list[dict[str, float]], task_type: str, batch_size: int, path: Path,
                        split: str = "eval") -> Path:
    """Accuracy (classes) or MSE and Pearson (numbers) against the examples seen (PredGen: its decoded answer
    dashed beside its adapter); the top axis counts steps."""
    names = ["accuracy"] if task_type == "classification" else ["mse", "pearson"]
    plt = pyplot()
    fig, axes = plt.subplots(1, len(names), figsize=(5.2 * len(names), 3.8), squeeze=False, layout="constrained")
    seen = [r["examples_seen"] for r in curve]
    for ax, name in zip(axes[0], names, strict=True):
        ax.plot(seen, [r[name] for r in curve], marker=".", label="prediction")
        if f"decoded_{name}" in curve[0]:  # PredGen: its adapter beside the answer it decoded
            ax.plot(seen, [r[f"decoded_{name}"] for r in curve], marker=".", ls="--", label="decoded answer")
            ax.legend(fontsize=8)
        ax.set(xlabel="examples seen", ylabel=name)
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.grid(alpha=0.3)
        top = ax.secondary_xaxis("top", functions=(lambda x: x / batch_size, lambda s: s * batch_size))
        top.set_xlabel("step")
    fig.suptitle(f"learning curve on the {'validation' if split == 'validation' else 'evaluation'} examples")
    return save_figure(fig, path)


def _cell(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def train_report(name: str, results: dict[str, Any]) -> str:
    """report.md of a ``predgen train`` run: what was trained, its metrics, the curve."""
    a = results["adapter"]
    metric_keys = ["accuracy", "macro_f1"] if "accuracy" in results else ["mse", "mae", "pearson", "spearman"]
    trained = method_named(results["method"]).trains
    if not trained:
        setting = (f"Base `{results['base']}`, untrained (zero-shot), seed {results['seed']}; evaluated on "
                   f"{results['eval_examples']} examples.")
    else:
        setting = (f"Base `{results['base']}`, adapter {a['method']} (r={a['r']}), {results['steps']} steps × "
                   f"{results['batch_size']} examples ({results['train_examples']} train examples), seed "
                   f"{results['seed']}; evaluated on {results['eval_examples']} examples.")
    columns = [("decoded", "decoded answer"), ("expected_value", "expected value")]
    columns += [("rank", "rank (sum log-prob)"), ("rank_norm", "rank (per character)")] if "rank" in results else []
    lines = [f"# PredGen run `{name}`: {results['method']} on {results['task']}", "", setting, "",
             f"| metric | prediction | {' | '.join(c for _, c in columns)} |", "|---" * (len(columns) + 2) + "|"]
    for k in metric_keys:
        cells = [_cell(results.get(k))] + [_cell(results.get(key, {}).get(k, "-")) for key, _ in columns]
        lines.append(f"| {k} | {' | '.join(cells)} |")
    if "prediction_by" in results:
        lines += ["", f"Prediction: {results['prediction_by']}."]
    if "agreement" in results:
        names = {"rank": "the rank decoder (sum)", "rank_norm": "the rank decoder (per character)",
                 "decoded": "its own written answer"}
        shown = ", ".join(f"{names[k]} {v:.4f}" for k, v in results["agreement"].items())
        lines += ["", f"How often the prediction is the same answer as {shown}."]
    if "validation" in results:
        v = results["validation"]
        shown = ", ".join(f"{k} {_cell(v[k])}" for k in metric_keys if k in v)
        lines += ["", f"Validation split ({results['val_examples']} examples carved from the training data, the "
                  f"split to select on): {shown}."]
    if "parse_failure_rate" in results:
        lines += ["", f"Parse-failure rate of the decoded answers: {results['parse_failure_rate']:.4f}."]
    if "learning_curve" in results:
        n = len(results["learning_curve"])
        lines += ["", f"Learning curve ({n} points, `results.json` `learning_curve`):", "",
                  "![learning curve](learning_curve.png)"]
    files = "`results.json`, `predictions.jsonl`" + (", `metrics.jsonl`, `model/`" if trained else "")
    lines += ["", f"Files: {files}{', `validation_predictions.jsonl`' if 'validation' in results else ''}."]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------------------------


def score(enc: Encoder, items: list[dict[str, Any]], values: list[Any]) -> dict[str, float]:
    targets = [i["target"] for i in items]
    if enc.spec.task_type == "classification":
        return classification_metrics(targets, values, enc.n_out)
    return regression_metrics(targets, values)


def evaluate(model: PredGenModel, method: Method | str, enc: Encoder, items: list[dict[str, Any]], es: EvalSettings,
             layer: int, device: torch.device | str = "cpu") -> tuple[dict[str, Any], Predictions]:
    """Metrics of the method's prediction (PredGen: the adapter's), of the decoded answer beside it, and of
    the expected value (regression, decoder=expected); parse-failure rate; examples/s and latency."""
    if not items:
        raise ForethoughtError("nothing to evaluate: the eval split is empty")
    expected = es.decoder == "expected"
    # classification (multiple choice, label words): the rank decoder always runs for a method that writes its
    # answer, the bar any prediction must clear (and agree with less)
    rank = es.decoder == "rank" or enc.spec.task_type == "classification"
    preds = predict(model, method, enc, items, es.batch_size, layer, expected, device, rank=rank)
    out: dict[str, Any] = dict(score(enc, items, preds.prediction))
    if preds.decoded is not None:
        out["decoded"] = score(enc, items, preds.decoded)
        out["parse_failure_rate"] = preds.parse_failures / len(items)
    if preds.expected is not None:
        out["expected_value"] = score(enc, items, preds.expected)
    if preds.rank is not None:
        out["rank"] = score(enc, items, preds.rank)
        out["rank_norm"] = score(enc, items, preds.rank_norm)
    agree = agreement(preds, method_named(method).answers_twice)
    if agree:
        out["agreement"] = agree
    out["examples_per_s"] = len(items) / preds.seconds
    out["eval_batch_size"] = es.batch_size
    if es.latency_examples > 0:
        times = []
        for it in items[:es.latency_examples]:
            t0 = time.perf_counter()
            predict(model, method, enc, [it], 1, layer, False, device)
            times.append(time.perf_counter() - t0)
        out["latency_ms"] = 1000 * statistics.median(times)
    return out, preds


def write_predictions(path: Path, enc: Encoder, items: list[dict[str, Any]], preds: Predictions) -> None:
    def show(v: Any) -> Any:
        return enc.spec.labels[v] if enc.spec.task_type == "classification" else v

    lines = []
    for k, it in enumerate(items):
        row: dict[str, Any] = {"id": it["id"], "prediction": show(preds.prediction[k])}
        if preds.decoded is not None:
            row["decoded"] = show(preds.decoded[k])
            row["decoded_text"] = preds.decoded_text[k]
        if preds.expected is not None:
            row["expected_value"] = preds.expected[k]
        if preds.rank is not None:
            row["rank"], row["rank_norm"] = show(preds.rank[k]), show(preds.rank_norm[k])
        if "target" in it:
            row["target"] = show(it["target"])
        lines.append(json.dumps(row))
    atomic_write_text(path, "".join(line + "\n" for line in lines))


@run_models()  # env.json names the models this run loads, not an earlier run's
def run_eval(cfg: EvalConfig, resume: str | None = None) -> dict[str, Any]:
    saved = load_saved(cfg.model, cfg.device)
    meta, enc = saved.meta, saved.enc
    if cfg.eval.decoder == "rank" and (not method_named(meta["method"]).decodes
                                       or enc.spec.task_type != "classification"):
        raise ForethoughtError("eval.decoder rank ranks the choices of a generating method (generator, predgen) "
                               "on a classification task")
    items = enc.encode(saved_examples(saved, cfg.split, cfg.max_examples, cfg.seed))
    metrics, preds = evaluate(saved.model, meta["method"], enc, items, cfg.eval, meta["layer"], saved.device)
    results = {"method": meta["method"], "task": meta["task_spec"]["name"], "split": cfg.split,
               "split_checked": "data" in meta, "examples": len(items), **metrics}
    out = Path(cfg.out) if cfg.out else saved.folder.parent / f"eval-{cfg.split}.json"
    atomic_write_json(out, results)
    write_predictions(out.with_suffix(".predictions.jsonl"), enc, items, preds)
    print(json.dumps({k: v for k, v in results.items() if not isinstance(v, dict)}, indent=1))
    print(f"wrote {out}")
    return results


@run_models()  # env.json names the models this run loads, not an earlier run's
def run_predict(cfg: PredictConfig, resume: str | None = None) -> Path:
    if not cfg.input:
        raise ForethoughtError("give the inputs: --input FILE (.csv, .tsv or .jsonl)")
    saved = load_saved(cfg.model, cfg.device)
    examples = read_inputs(cfg.input, saved.enc.spec, cfg.id_field or None)
    items = saved.enc.encode(examples, with_targets=False)
    preds = predict(saved.model, saved.meta["method"], saved.enc, items, cfg.eval.batch_size, saved.meta["layer"],
                    cfg.eval.decoder == "expected", saved.device, rank=cfg.eval.decoder == "rank")
    inp = Path(cfg.input)
    out = Path(cfg.output) if cfg.output else inp.with_name(inp.stem + ".predictions.jsonl")
    write_predictions(out, saved.enc, items, preds)
    print(f"wrote {len(items)} predictions to {out}")
    return out
