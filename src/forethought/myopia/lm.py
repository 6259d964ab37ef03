"""``forethought myopia lm``: vanilla vs myopic language-model training, and the myopia gap.

The natural-language experiment of Wu et al. 2024, "Do language models plan for future tokens?": how much worse
a model gets when no position's loss may shape the states that later positions read.

Trains, with the same data, budget and initialisation, each of the ``variants``:

* ``vanilla`` — plain training;
* ``detach_hidden`` / ``detach_kv`` — myopic training (the gap = myopic − vanilla validation loss);
* ``local`` — myopic, but other positions' states come from the frozen trained vanilla model. The paper's
  "local-myopic bonus" = vanilla − local loss (GPT-2 124M: 3.28 − 3.26 = 0.02): how much a model that optimises
  only each position's own loss, on a vanilla model's past states, improves on that vanilla model — small under
  breadcrumbs, large if vanilla gave up present accuracy for the future. ``myopic_minus_local`` (myopic − local)
  is reported beside it: how much of the gap the past states' content explains;
* ``zero_past`` — the transformer-bigram baseline (no access to other positions). With it, the gap is also
  reported relative to the benefit of context, ``gap_over_context`` = (myopic − vanilla) / (bigram − vanilla)
  (paper: 0.12 / 2.05 = 0.06), since a regime that barely uses context can only show a small absolute gap.

The model is our GPT from scratch (``base: gpt``) or any HF causal LM fine-tuned (``base: <hub id | folder |
smollm2-135m>``, full or LoRA through peft). Validation loss is reported overall and per position (plot),
and every ``--train.eval_every`` steps on the first ``data.curve_sequences`` validation windows.
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from forethought.core.checkpoint import latest_checkpoint, load_checkpoint, verify_checkpoint
from forethought.core.config import load_config
from forethought.core.env import cache_dir, run_models
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_text
from forethought.core.plots import line_plot
from forethought.core.precision import base_dtype
from forethought.core.run import Run
from forethought.core.runtime import runtime_for, step_generator, unwrap
from forethought.core.trainer import TrainHooks, train
from forethought.data.corpora import (
    eval_windows,
    load_token_splits,
    passage_sequences,
    random_windows,
    vocab_size_for,
)
from forethought.data.token_ids import (
    check_vocabulary,
    is_token_ids,
    ordered_rows,
    read_token_ids,
    row_align,
    token_id_streams,
)
from forethought.models.gpt import GPT, load_gpt
from forethought.myopia.config import (  # noqa: F401  (their home imports no torch; importable from here too)
    VARIANTS,
    LMConfig,
    LMDataConfig,
    MyopiaSettings,
)
from forethought.myopia.wrap import make_myopic


def beta_for(settings: MyopiaSettings, variant: str) -> float:
    """The beta dial a variant trains with: the setting for the myopic models, 0 for the baselines."""
    return settings.beta if variant in ("detach_hidden", "detach_kv") else 0.0


def horizon_for(settings: MyopiaSettings, variant: str) -> int:
    """The myopia horizon a variant trains with: the setting for the myopic models, 0 for the baselines (local and
    zero_past keep their definitions)."""
    return settings.horizon if variant in ("detach_hidden", "detach_kv") else 0


def tokenizer_spec(cfg: LMConfig) -> str:
    return cfg.base if (cfg.data.tokenizer == "auto" and cfg.base != "gpt") else cfg.data.tokenizer


def load_tokens(cfg: LMConfig) -> tuple[np.ndarray, np.ndarray]:
    """Train and valid token streams (with ``data.sequences passages``: the passages' sequences, (N, seq_len))."""
    spec = tokenizer_spec(cfg)
    if spec == "auto":
        raise ForethoughtError("data.tokenizer 'auto' needs an HF base model; with base 'gpt' name one (e.g. gpt2)")
    if cfg.data.sequences == "passages":
        return passage_sequences(cfg.data.corpus, spec, cache_dir(cfg.data.cache_dir), cfg.data.seq_len)
    if is_token_ids(cfg.data.corpus):  # pre-tokenised: rows joined into streams (row_align keeps windows on rows)
        return token_id_streams(cfg.data.corpus, spec, cfg.data.seq_len + 2, f"seq_len {cfg.data.seq_len}")
    return load_token_splits(cfg.data.corpus, spec, cache_dir(cfg.data.cache_dir), cfg.data.seq_len + 2,
                             f"seq_len {cfg.data.seq_len}")


def passage_batch(train: np.ndarray, step: int, batch_size: int) -> torch.Tensor:
    """The training batch of ``step`` in one ordered pass over the passages' sequences: rows [step·B, (step+1)·B)."""
    return torch.from_numpy(np.asarray(train[step * batch_size:(step + 1) * batch_size], dtype=np.int64))


def build_model(cfg: LMConfig, vocab_size: int) -> torch.nn.Module:
    """A fresh model: our GPT (seeded init) or the HF base (optionally with LoRA)."""
    torch.manual_seed(cfg.run.seed)
    if cfg.base == "gpt":
        gcfg = copy.deepcopy(cfg.gpt)
        gcfg.vocab_size = vocab_size
        return GPT(gcfg)
    from forethought.models.hf import load_causal_lm

    dtype = base_dtype(cfg.base_dtype, cfg.run.precision, trains_base=cfg.lora_r == 0)
    model, _ = load_causal_lm(cfg.base, dtype=dtype)
    if cfg.lora_r > 0:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0,
                                                 target_modules="all-linear"))
    return model


def logits_of(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """(B, T) ids -> (B, T, V) logits for our GPT and HF models alike."""
    if isinstance(unwrap(model), GPT):
        return model(ids)
    return model(input_ids=ids, use_cache=False).logits


def lm_loss(model: torch.nn.Module, batch: torch.Tensor) -> tuple[torch.Tensor, dict]:
    logits = logits_of(model, batch[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1)), {}


@torch.no_grad()
def per_position_loss(model: torch.nn.Module, windows: torch.Tensor, batch: int = 32) -> list[float]:
    """Mean cross-entropy (nats) at each position t (predicting token t+1) over the windows."""
    model.eval()
    dev = next(model.parameters()).device
    total = torch.zeros(windows.shape[1] - 1, dtype=torch.float64)
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch].to(dev)
        logits = logits_of(model, w[:, :-1]).float()
        ce = F.cross_entropy(logits.transpose(1, 2), w[:, 1:], reduction="none")  # (b, T)
        total += ce.double().sum(0).cpu()
    return (total / len(windows)).tolist()


def load_data(cfg: LMConfig) -> tuple[np.ndarray, np.ndarray, int]:
    """Train and validation token streams and the vocabulary size the model needs."""
    train_tokens, valid_tokens = load_tokens(cfg)
    # our GPT's vocabulary covers every id its tokenizer can emit; an HF base brings its own
    tokenizer = lm_tokenizer(cfg) if cfg.base == "gpt" or is_token_ids(cfg.data.corpus) else None
    if is_token_ids(cfg.data.corpus):  # ids made by another tokenizer would train silently
        check_vocabulary(read_token_ids(cfg.data.corpus), len(tokenizer), tokenizer_spec(cfg))
        tokenizer = tokenizer if cfg.base == "gpt" else None
    return train_tokens, valid_tokens, vocab_size_for(train_tokens, valid_tokens, tokenizer=tokenizer)


def lm_tokenizer(cfg: LMConfig) -> Any:
    """The tokenizer the run's token arrays were written with (a run folder keeps a copy: ``tokenizer/``)."""
    from forethought.data.corpora import load_corpus_text
    from forethought.data.tokenizers import load_tokenizer

    spec = tokenizer_spec(cfg)
    text = load_corpus_text(cfg.data.corpus, "train") if spec.startswith("bpe:") else None
    return load_tokenizer(spec, corpus_text=text, cache_dir=cache_dir(cfg.data.cache_dir) / "tokenizers")


REPEAT_WARNING_EPOCHS = 3.0  # the paper trains one epoch; a run past this many repeats its corpus


def epochs_of(cfg: LMConfig, train_tokens: int) -> float:
    """Passes over the train split that ``train.steps`` × ``batch_size`` windows of ``seq_len`` tokens make."""
    return cfg.train.steps * cfg.train.batch_size * cfg.data.seq_len / max(train_tokens, 1)


def repeat_warning(cfg: LMConfig, train_tokens: int) -> str | None:
    """One line when the run would repeat its corpus more than REPEAT_WARNING_EPOCHS times, else None."""
    epochs = epochs_of(cfg, train_tokens)
    if epochs <= REPEAT_WARNING_EPOCHS:
        return None
    seen = cfg.train.steps * cfg.train.batch_size * cfg.data.seq_len
    return (f"warning: {cfg.train.steps} steps × {cfg.train.batch_size} × {cfg.data.seq_len} tokens = {seen:,} "
            f"tokens is {epochs:.1f} epochs of corpus '{cfg.data.corpus}' ({train_tokens:,} train tokens); the "
            "paper trains one epoch (a larger corpus: an hf: dataset or a .txt path)")


@run_models()  # env.json names the models this run loads, not an earlier run's
def run(cfg: LMConfig, resume: str | None = None) -> dict:
    rt = runtime_for(cfg.run)
    train_tokens, valid_tokens, vocab = load_data(cfg)
    passages = cfg.data.sequences == "passages"
    if passages:  # one ordered pass: every step a batch of sequences never seen before
        if cfg.train.steps * cfg.train.batch_size > len(train_tokens):
            raise ForethoughtError(
                f"corpus '{cfg.data.corpus}' has {len(train_tokens):,} training passages of {cfg.data.seq_len} tokens: "
                f"one pass is at most {len(train_tokens) // cfg.train.batch_size} steps of {cfg.train.batch_size}, "
                f"not {cfg.train.steps}")
        windows = torch.from_numpy(np.asarray(valid_tokens[:cfg.data.eval_sequences], dtype=np.int64))
    else:
        warning = repeat_warning(cfg, len(train_tokens))
        if warning and rt.is_main:
            print(warning, file=sys.stderr, flush=True)
        windows = eval_windows(valid_tokens, cfg.data.eval_sequences, cfg.data.seq_len + 1)
    L = cfg.data.seq_len + 1
    curve_windows = windows[:cfg.data.curve_sequences]
    parent = Run.create(cfg.run.out_dir, cfg.run.name, cfg, is_main=rt.is_main)  # after every input is checked

    rows = row_align(cfg.data.corpus, L) > 1  # pre-tokenised rows of L tokens

    def batch_fn(step: int) -> torch.Tensor:
        if passages:
            return passage_batch(train_tokens, step, cfg.train.batch_size)
        if rows:  # the reference's one ordered pass over the rows
            return ordered_rows(train_tokens, L, step, cfg.train.batch_size)
        return random_windows(train_tokens, cfg.train.batch_size, L, step_generator(cfg.run.seed, step))

    def eval_fn(model: torch.nn.Module, step: int) -> dict[str, float]:
        return {"val_loss": float(np.mean(per_position_loss(model, curve_windows)))}

    results: dict = {"base": cfg.base, "corpus": cfg.data.corpus, "tokenizer": tokenizer_spec(cfg),
                     "myopia_horizon": cfg.myopia.horizon, "myopia_beta": cfg.myopia.beta,
                     "local_form": cfg.myopia.local_form, "sequences": cfg.data.sequences,
                     "train_tokens": int(np.prod(train_tokens.shape)),
                     "epochs": (cfg.train.steps * cfg.train.batch_size / len(train_tokens) if passages
                                else epochs_of(cfg, len(train_tokens))),
                     "seq_len": cfg.data.seq_len, "steps": cfg.train.steps, "batch_size": cfg.train.batch_size,
                     "tokens_seen": cfg.train.steps * cfg.train.batch_size * cfg.data.seq_len,
                     "eval_sequences": len(windows), "variants": {}}
    t0 = time.perf_counter()
    from forethought.data.tokenizers import RUN_TOKENIZER, save_run_tokenizer  # transformers: only to run

    vanilla_model = None
    for variant in cfg.variants:
        model = build_model(cfg, vocab)
        # the run's own copy of its tokenizer, once the model has loaded (a bad base leaves no folder behind)
        if rt.is_main and not (parent.dir / RUN_TOKENIZER).is_dir():
            save_run_tokenizer(lm_tokenizer(cfg), parent.start().dir)
        results.setdefault("params", sum(p.numel() for p in model.parameters()))
        results.setdefault("trainable_params", sum(p.numel() for p in model.parameters() if p.requires_grad))
        if variant != "vanilla":
            make_myopic(model, mode=variant, frozen=vanilla_model if variant == "local" else None,
                        horizon=horizon_for(cfg.myopia, variant), beta=beta_for(cfg.myopia, variant),
                        local_form=cfg.myopia.local_form)
        sub = parent.sub(variant)
        out = train(model, lm_loss, batch_fn, cfg.train, sub, rt, resume=resume, desc=variant,
                    hooks=TrainHooks(eval_fn=eval_fn),
                    model_config=model.checkpoint_record() if isinstance(model, GPT) else None)
        per_pos = per_position_loss(model, windows)
        res = {"val_loss": float(np.mean(per_pos)), "per_position": per_pos, "train_wall_s": out["wall_s"],
               "curve": out["curve"], "eval_curve": out.get("eval_curve", [])}
        sub.write_results(res)
        results["variants"][variant] = res
        if variant == "vanilla":
            vanilla_model = model
    results["wall_s"] = time.perf_counter() - t0
    _summarise(results)
    if rt.is_main:
        parent.write_results(results)
        _report(results, parent)
    return results


def _summarise(results: dict) -> None:
    v = results["variants"]
    myopic = next((m for m in ("detach_hidden", "detach_kv") if m in v), None)
    if "vanilla" in v and myopic:
        results["gap"] = v[myopic]["val_loss"] - v["vanilla"]["val_loss"]
        results["gap_relative"] = results["gap"] / v["vanilla"]["val_loss"]
        results["gap_per_position"] = [a - b for a, b in zip(v[myopic]["per_position"], v["vanilla"]["per_position"],
                                                             strict=True)]
    if "vanilla" in v and "local" in v:  # the paper's definition
        results["local_myopic_bonus"] = v["vanilla"]["val_loss"] - v["local"]["val_loss"]
    if myopic and "local" in v:
        results["myopic_minus_local"] = v[myopic]["val_loss"] - v["local"]["val_loss"]
    if "zero_past" in v:
        results["transformer_bigram"] = v["zero_past"]["val_loss"]
        if "gap" in results:
            results["gap_over_context"] = gap_over_context(v[myopic]["val_loss"], v["vanilla"]["val_loss"],
                                                           v["zero_past"]["val_loss"])


def gap_over_context(myopic: float, vanilla: float, bigram: float) -> float | None:
    """(myopic − vanilla) / (bigram − vanilla): the share of what context buys a vanilla model that myopic
    training gives up (None when context buys nothing)."""
    benefit = bigram - vanilla
    return (myopic - vanilla) / benefit if benefit > 0 else None


def _report(results: dict, run: Run) -> None:
    v = results["variants"]
    line_plot({k: (range(len(r["per_position"])), r["per_position"]) for k, r in v.items()},
              run.path("per_position.png"), title="validation loss per position", xlabel="position t",
              ylabel="cross-entropy (nats)")
    lines = ["# Myopia: language modelling", "",
             f"base {results['base']}, {results['corpus']} ({results['tokenizer']} tokens), "
             f"{results['steps']} steps × {results['batch_size']} × {results['seq_len']} tokens "
             f"= {results['tokens_seen']:,} tokens per model.", "",
             "| variant | val loss (nats) | train wall (s) |", "|---|---|---|"]
    lines += [f"| {k} | {r['val_loss']:.4f} | {r['train_wall_s']:.0f} |" for k, r in v.items()]
    labels = {"gap": ("gap", " (myopic − vanilla)"),
              "local_myopic_bonus": ("local-myopic bonus", " (vanilla − local, the paper's definition)"),
              "myopic_minus_local": ("myopic − local", ""), "transformer_bigram": ("transformer bigram", "")}
    for key, (label, meaning) in labels.items():
        if key in results:
            lines.append(f"\n{label}: {results[key]:.4f} nats{meaning}")
    if results.get("gap_over_context") is not None:
        lines.append(f"\ngap / (bigram − vanilla): {results['gap_over_context']:.3f}")
    lines += ["", "![per-position loss](per_position.png)", ""]
    atomic_write_text(run.path("report.md"), "\n".join(lines))
    print("\n".join(lines[:-3]))


def _checked_variant(lm_run: Path, variant: str) -> tuple[LMConfig, Path]:
    """Check a trained variant of a ``myopia lm`` run without building it: the run's config and the variant's
    newest checkpoint."""
    cfg_path = lm_run / "config.yaml"
    if not cfg_path.is_file():
        raise ForethoughtError(f"{lm_run} is not a 'myopia lm' run folder (no config.yaml)")
    try:
        cfg = load_config(LMConfig, cfg_path)
    except ForethoughtError as e:
        raise ForethoughtError(f"{lm_run} is not a 'myopia lm' run folder ({cfg_path.name}: {e})") from None
    ckpt = latest_checkpoint(lm_run / variant)
    if ckpt is None:
        raise ForethoughtError(f"no checkpoint for variant '{variant}' in {lm_run}")
    return cfg, ckpt


def load_variant(lm_run: str | Path, variant: str,
                 device: str | torch.device = "cpu") -> tuple[torch.nn.Module, LMConfig]:
    """Rebuild a trained variant of a ``myopia lm`` run on ``device``, with the attention it was trained with
    (``zero_past`` and ``local`` change the forward pass; ``local`` reads the run's trained vanilla model). Our
    GPT comes from its checkpoint's record alone (:func:`forethought.models.gpt.load_gpt`); an HF base is loaded
    by name and its trained weights (verified against the manifest first) loaded into it."""
    cfg, ckpt = _checked_variant(Path(lm_run), variant)
    if cfg.base == "gpt":
        model = load_gpt(ckpt)[0]
    else:
        manifest = verify_checkpoint(ckpt)  # before the base model loads
        model = build_model(cfg, 0)
        load_checkpoint(ckpt, model, manifest=manifest)
    model.to(device)
    if variant != "vanilla":  # the detach modes leave the forward as it is; applied anyway, as in training
        frozen = load_variant(lm_run, "vanilla", device)[0] if variant == "local" else None
        make_myopic(model, mode=variant, frozen=frozen, horizon=horizon_for(cfg.myopia, variant),
                    beta=beta_for(cfg.myopia, variant), local_form=cfg.myopia.local_form)
    return model.eval(), cfg
