"""``forethought predgen train | eval | predict``: fine-tune an HF causal LM with one of the three methods, then
evaluate it, or predict on new inputs with a saved model.

``train`` writes the run folder (config, metrics, checkpoints for ``--resume auto``), the saved model
(``<run>/model/``: peft adapter or full weights, the head, ``predgen.json``), the evaluation
(``results.json``) and the eval-split predictions (``predictions.jsonl``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from forethought.core.config import field
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_json, atomic_write_text
from forethought.core.run import Run, RunConfig
from forethought.core.runtime import compute_init, unwrap
from forethought.core.trainer import TrainConfig, train
from forethought.predgen.methods import (
    METHODS,
    Encoder,
    PredGenSettings,
    Predictions,
    PromptConfig,
    generator_loss,
    predgen_loss,
    predict,
    predictor_loss,
    sampling_p,
)
from forethought.predgen.metrics import classification_metrics, regression_metrics
from forethought.predgen.model import (
    AdapterConfig,
    PredGenModel,
    apply_adapter,
    build_head,
    hidden_size,
    load_model,
    read_meta,
    save_model,
)
from forethought.predgen.tasks import Example, TaskSpec, load_task, read_inputs


@dataclass
class TaskConfig:
    name: str = field("sst2", "built-in task (sst2, boolq, arc-easy, arc-challenge, piqa, stsb, sick, wassa, "
                      "wassa-<emotion>) or a .csv/.tsv/.jsonl file")
    template: str = field("", "prompt template over the example fields ('' = the task's default)")
    target_field: str = field("", "data files: the target column")
    text_fields: list[str] = field([], "data files: the columns shown to the model (default: all but target/id)")
    task_type: str = field("classification", "data files: classification | regression")
    eval_path: str = field("", "data files: a separate eval file (default: a seeded 20 percent split)")
    labels: list[str] = field([], "data files: label words in class order (default: sorted train targets)")
    id_field: str = field("", "data files: a column of example ids")
    long_field: str = field("", "data files: the field cut when a prompt is over its token budget")
    max_train_examples: int = field(0, "use at most this many training examples (a seeded subset; 0 = all)")
    max_eval_examples: int = field(0, "evaluate on at most this many examples (a seeded subset; 0 = all)")

    def options(self, builtin: bool) -> dict[str, Any]:
        opts: dict[str, Any] = {"template": self.template or None}
        if not builtin:
            opts.update(target_field=self.target_field or None, text_fields=self.text_fields or None,
                        task_type=self.task_type, eval_path=self.eval_path or None, labels=self.labels or None,
                        id_field=self.id_field or None, long_field=self.long_field or None)
        elif any((self.target_field, self.text_fields, self.eval_path, self.labels, self.id_field, self.long_field)):
            raise ForethoughtError(f"task '{self.name}' is built in: target_field, text_fields, eval_path, labels, "
                                   "id_field and long_field apply only to data files")
        return {k: v for k, v in opts.items() if v is not None}


@dataclass
class HeadConfig:
    pooling: str = field("", "predictor: last | mean; predgen adapter: attention | mean ('' = last / attention)")
    hidden: int = field(256, "predgen adapter MLP width")


@dataclass
class EvalSettings:
    batch_size: int = field(32, "examples per inference batch")
    decoder: Literal["greedy", "expected"] = field(
        "greedy", "regression generator/predgen: also compute the expected value over every well-formed number")
    latency_examples: int = field(16, "examples timed one at a time for the per-example latency (0 = skip)")


@dataclass
class PredGenConfig:
    run: RunConfig = field(RunConfig(name="predgen"), "run folder, seed, device")
    method: Literal["predictor", "generator", "predgen"] = field("predgen", "predictor | generator | predgen")
    base: str = field("smollm2-135m", "HF causal LM: hub id, local folder, or smollm2-135m (offline)")
    trust_remote_code: bool = field(False, "allow model code from the hub")
    adapter: AdapterConfig = field(AdapterConfig(), "PEFT setting (the same for every method)")
    task: TaskConfig = field(TaskConfig(), "task and data")
    prompt: PromptConfig = field(PromptConfig(), "prompt rendering and answer format")
    layer: int = field(-1, "hidden-state layer read by the predictor head / task adapter (-1 = last)")
    mask_prompt: bool = field(True, "generator/predgen: no LM loss on prompt tokens (False = loss on them too)")
    head: HeadConfig = field(HeadConfig(), "predictor head / predgen task adapter")
    predgen: PredGenSettings = field(PredGenSettings(), "scheduled sampling, adapter input, WDAL")
    train: TrainConfig = field(TrainConfig(steps=150, batch_size=16, lr=2e-4, warmup_steps=10, log_every=10),
                               "optimisation")
    eval: EvalSettings = field(EvalSettings(), "evaluation")


# ----------------------------------------------------------------------------------------------------------
# train
# ----------------------------------------------------------------------------------------------------------


def _subset(items: list[Example], n: int, seed: int) -> list[Example]:
    if n <= 0 or n >= len(items):
        return items
    g = torch.Generator().manual_seed(seed)
    keep = sorted(torch.randperm(len(items), generator=g)[:n].tolist())
    return [items[i] for i in keep]


def load_data(cfg: PredGenConfig) -> tuple[TaskSpec, list[Example], list[Example]]:
    from forethought.predgen.tasks import known_tasks

    builtin = cfg.task.name.strip().lower().replace("_", "-") in known_tasks()
    opts = cfg.task.options(builtin)
    spec, train_ex = load_task(cfg.task.name, "train", cfg.run.seed, **opts)
    _, eval_ex = load_task(cfg.task.name, "eval", cfg.run.seed, **opts)
    return spec, _subset(train_ex, cfg.task.max_train_examples, cfg.run.seed), \
        _subset(eval_ex, cfg.task.max_eval_examples, cfg.run.seed + 1)


def _pooling(cfg_pooling: str, method: str) -> str:
    return cfg_pooling or ("last" if method == "predictor" else "attention")


def run_train(cfg: PredGenConfig, resume: str | None = None) -> dict[str, Any]:
    from forethought.models.hf import load_causal_lm

    if cfg.method not in METHODS:
        raise ForethoughtError(f"unknown method '{cfg.method}'; choose one of {', '.join(METHODS)}")
    rt = compute_init(cfg.run.device, cfg.run.seed)
    spec, train_ex, eval_ex = load_data(cfg)
    lm, tok = load_causal_lm(cfg.base, trust_remote_code=cfg.trust_remote_code)
    enc = Encoder(spec, tok, cfg.prompt)
    eval_items = enc.encode(eval_ex)
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
    pooling = _pooling(cfg.head.pooling, cfg.method)
    head = build_head(cfg.method, hidden_size(lm), enc.n_out, pooling, cfg.head.hidden, bias)
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
        batch = enc.collate(picks)
        batch["p"] = sampling_p(cfg.predgen, step, cfg.train.steps)
        batch["seed"] = cfg.run.seed * 1_000_003 + step
        return batch

    task_type = spec.task_type
    if cfg.method == "predictor":
        def loss_fn(m: Any, b: dict) -> Any:
            return m(predictor_loss, b, task_type, cfg.layer)
    elif cfg.method == "generator":
        def loss_fn(m: Any, b: dict) -> Any:
            return m(generator_loss, b, cfg.mask_prompt)
    else:
        def loss_fn(m: Any, b: dict) -> Any:
            return m(predgen_loss, b, cfg.predgen, enc, task_type, cfg.layer, cfg.mask_prompt)

    after_step = None
    if cfg.adapter.method == "adalora":
        def after_step(m: Any, step: int) -> None:  # AdaLoRA's rank budget needs the gradients of each step
            unwrap(m).lm.base_model.update_and_allocate(step)

    out = train(model, loss_fn, batch_fn, cfg.train, run, rt, resume=resume, desc=f"predgen {cfg.method}",
                after_step=after_step)
    results: dict[str, Any] = {"method": cfg.method, "task": spec.name, "base": cfg.base,
                               "adapter": dataclasses.asdict(cfg.adapter), "steps": cfg.train.steps,
                               "batch_size": bs, "train_examples": n, "eval_examples": len(eval_items),
                               "train_wall_s": out["wall_s"], "final_loss": out.get("final_loss"),
                               "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
                               "seed": cfg.run.seed}
    if rt.is_main:
        meta = {"method": cfg.method, "base": cfg.base, "task_spec": dataclasses.asdict(spec),
                "prompt": dataclasses.asdict(cfg.prompt), "layer": cfg.layer, "n_out": enc.n_out,
                "head": {"pooling": pooling, "hidden": cfg.head.hidden}}
        save_model(model, tok, run.dir / "model", meta, cfg.adapter)
        model.to(rt.device)
        metrics, preds = evaluate(model, cfg.method, enc, eval_items, cfg.eval, cfg.layer, rt.device)
        results.update(metrics)
        write_predictions(run.dir / "predictions.jsonl", enc, eval_items, preds)
        run.write_results(results)
        print(json.dumps({k: v for k, v in results.items() if not isinstance(v, dict)}, indent=1))
    return results


@functools.lru_cache(maxsize=4)
def _perm(n: int, seed: int, epoch: int) -> list[int]:
    g = torch.Generator().manual_seed(seed * 7_919 + epoch)
    return torch.randperm(n, generator=g).tolist()


# ----------------------------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------------------------


def score(enc: Encoder, items: list[dict[str, Any]], values: list[Any]) -> dict[str, float]:
    targets = [i["target"] for i in items]
    if enc.spec.task_type == "classification":
        return classification_metrics(targets, values, enc.n_out)
    return regression_metrics(targets, values)


def evaluate(model: PredGenModel, method: str, enc: Encoder, items: list[dict[str, Any]], es: EvalSettings,
             layer: int, device: torch.device | str = "cpu") -> tuple[dict[str, Any], Predictions]:
    """Metrics of the method's prediction (PredGen: the adapter's), of the decoded answer beside it, and of
    the expected value (regression, decoder=expected); parse-failure rate; examples/s and latency."""
    if not items:
        raise ForethoughtError("nothing to evaluate: the eval split is empty")
    expected = es.decoder == "expected"
    preds = predict(model, method, enc, items, es.batch_size, layer, expected, device)
    out: dict[str, Any] = dict(score(enc, items, preds.prediction))
    if preds.decoded is not None:
        out["decoded"] = score(enc, items, preds.decoded)
        out["parse_failure_rate"] = preds.parse_failures / len(items)
    if preds.expected is not None:
        out["expected_value"] = score(enc, items, preds.expected)
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
        if "target" in it:
            row["target"] = show(it["target"])
        lines.append(json.dumps(row))
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def _model_folder(path: str) -> Path:
    if not path:
        raise ForethoughtError("give the trained model: --model <run folder>")
    p = Path(path).expanduser()
    return p / "model" if (p / "model").is_dir() else p


@dataclass
class EvalConfig:
    model: str = field("", "a trained run folder (or its model/ folder)")
    split: Literal["train", "eval"] = field("eval", "which split of the model's task")
    max_examples: int = field(0, "at most this many examples (a seeded subset; 0 = all)")
    seed: int = field(0, "seed of the split (seeded-split tasks) and the subset")
    device: str = field("auto", "auto | cpu | cuda")
    eval: EvalSettings = field(EvalSettings(), "batch size, decoder, latency")
    out: str = field("", "where to write the results JSON ('' = <run>/eval-<split>.json)")


def _load_saved(path: str, device: str) -> tuple[PredGenModel, Encoder, dict[str, Any], torch.device]:
    folder = _model_folder(path)
    meta = read_meta(folder)
    model, tok = load_model(folder, meta)
    spec_d = dict(meta["task_spec"])
    if spec_d.get("value_range") is not None:
        spec_d["value_range"] = tuple(spec_d["value_range"])
    enc = Encoder(TaskSpec(**spec_d), tok, PromptConfig(**meta["prompt"]))
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                       ("cpu" if device == "auto" else device))
    return model.to(dev), enc, meta, dev


def saved_split(model: str, meta: dict[str, Any], split: str, max_examples: int, seed: int) -> list[Example]:
    """The examples of one split of a saved model's task, read with the run's own task settings (data files,
    template) when its config.yaml is there; at most ``max_examples`` (a seeded subset; 0 = all)."""
    saved_cfg = _model_folder(model).parent / "config.yaml"
    if saved_cfg.is_file():
        from forethought.core.config import load_config

        task_cfg = load_config(PredGenConfig, saved_cfg).task
    else:
        task_cfg = TaskConfig(name=meta["task_spec"]["name"])
    task_cfg.max_eval_examples = task_cfg.max_train_examples = max_examples
    _, train_ex, eval_ex = load_data(PredGenConfig(task=task_cfg, run=RunConfig(seed=seed)))
    return train_ex if split == "train" else eval_ex


def run_eval(cfg: EvalConfig, resume: str | None = None) -> dict[str, Any]:
    model, enc, meta, dev = _load_saved(cfg.model, cfg.device)
    folder = _model_folder(cfg.model)
    task_name = meta["task_spec"]["name"]
    items = enc.encode(saved_split(cfg.model, meta, cfg.split, cfg.max_examples, cfg.seed))
    metrics, preds = evaluate(model, meta["method"], enc, items, cfg.eval, meta["layer"], dev)
    results = {"method": meta["method"], "task": task_name, "split": cfg.split, "examples": len(items), **metrics}
    out = Path(cfg.out) if cfg.out else folder.parent / f"eval-{cfg.split}.json"
    atomic_write_json(out, results)
    write_predictions(out.with_suffix(".predictions.jsonl"), enc, items, preds)
    print(json.dumps({k: v for k, v in results.items() if not isinstance(v, dict)}, indent=1))
    print(f"wrote {out}")
    return results


@dataclass
class PredictConfig:
    model: str = field("", "a trained run folder (or its model/ folder)")
    input: str = field("", "a .csv/.tsv/.jsonl file with the fields the task's template reads")
    output: str = field("", "predictions JSONL to write ('' = <input stem>.predictions.jsonl beside the input)")
    id_field: str = field("", "a column of ids to copy into the output")
    device: str = field("auto", "auto | cpu | cuda")
    eval: EvalSettings = field(EvalSettings(latency_examples=0), "batch size and decoder")


def run_predict(cfg: PredictConfig, resume: str | None = None) -> Path:
    if not cfg.input:
        raise ForethoughtError("give the inputs: --input FILE (.csv, .tsv or .jsonl)")
    model, enc, meta, dev = _load_saved(cfg.model, cfg.device)
    examples = read_inputs(cfg.input, enc.spec, cfg.id_field or None)
    items = enc.encode(examples, with_targets=False)
    preds = predict(model, meta["method"], enc, items, cfg.eval.batch_size, meta["layer"],
                    cfg.eval.decoder == "expected", dev)
    inp = Path(cfg.input)
    out = Path(cfg.output) if cfg.output else inp.with_name(inp.stem + ".predictions.jsonl")
    write_predictions(out, enc, items, preds)
    print(f"wrote {len(items)} predictions to {out}")
    return out
