"""``forethought myopia arithmetic``: multiplication with zero-padding as filler, vanilla vs myopic.

The myopia paper's discrete-token pre-caching task (its reference code's ``src/data/arithmetic.py`` and
``lit_arithmetic`` notebook): GPT-2 trained from scratch on ``x * y = x·y`` with every number written in reverse
digit order (least significant digit first), each operand zero-padded to ``pad`` digits and the product to
2·max_digits. The loss is on the product's tokens only, so the padding zeros past an operand's max_digits are
positions without a loss of their own: a vanilla model can use them as computation space for the product; a myopic
model (``make_myopic``: no gradient from a position's loss into earlier positions) cannot train them for that.
The paper: with 5-digit operands padded to 10, the vanilla model multiplies (≈ 0.99), the myopic one does not
(≈ 0.06).

Tokens: the digits 0-9 are ids 0-9, ``*`` is 10, ``=`` is 11. (The reference writes each symbol with a leading space
and tokenises with GPT-2's BPE, which makes every ``" d"``, ``" *"``, ``" ="`` one token: the same sequence with a
50,257-row vocabulary of which 12 rows are used.)

Accuracy, as the reference's: a product counts when every one of its tokens is right. Greedy decoding from the
prompt and the argmax under teacher forcing agree on that (if every argmax is right, greedy decoding writes exactly
the true tokens; if not, the first wrong argmax is a wrong greedy token), so one forward pass scores it.
"""

from __future__ import annotations

import copy
import itertools
import time

import torch
import torch.nn.functional as F

from forethought.core.run import Run
from forethought.core.runtime import mix_seed, runtime_for, step_generator
from forethought.core.trainer import TrainHooks, to_device, train
from forethought.models.gpt import GPT
from forethought.myopia.config import (  # noqa: F401  (their home imports no torch; importable from here too)
    ArithmeticConfig,
    ArithmeticTaskConfig,
)
from forethought.myopia.wrap import make_myopic

TIMES, EQUALS = 10, 11  # token ids of '*' and '=' (the digits are their own ids)
VOCAB = 12
SYMBOLS = "0123456789*="


def seq_len(task: ArithmeticTaskConfig) -> int:
    """Tokens per example: two padded operands, '*', '=', the padded product."""
    return 2 * task.pad + 2 + 2 * task.max_digits


def prompt_len(task: ArithmeticTaskConfig) -> int:
    """Tokens before the product (the reference's ``acc_cutoff`` = 2·pad + 2)."""
    return 2 * task.pad + 2


def encode(x: int, y: int, pad: int, product_digits: int) -> list[int]:
    """One example as token ids: x and y reversed and zero-padded to ``pad`` digits, the product reversed and
    padded to ``product_digits``."""
    def rev(n: int, width: int) -> list[int]:
        return [int(c) for c in f"{n:0{width}d}"[::-1]]
    return rev(x, pad) + [TIMES] + rev(y, pad) + [EQUALS] + rev(x * y, product_digits)


def decode(ids: list[int]) -> str:
    """Token ids -> the reference's text (each symbol after a space), for reading examples."""
    return "".join(" " + SYMBOLS[i] for i in ids)


def reversed_digits(n: torch.Tensor, width: int) -> torch.Tensor:
    """(N,) non-negative int64 -> (N, width) its decimal digits, least significant first (zero-padded)."""
    powers = 10 ** torch.arange(width, dtype=torch.int64)  # (width,)
    return (n[:, None] // powers) % 10


def sample_operands(n: int, min_digits: int, max_digits: int, g: torch.Generator) -> torch.Tensor:
    """(n,) operands as the reference draws them: a digit count uniform in min..max, then a number uniform below
    10^count (so it may have leading zeros, i.e. fewer digits)."""
    digits = torch.randint(min_digits, max_digits + 1, (n,), generator=g)
    # uniform below 10^max, then mod 10^digits: uniform below 10^digits, since 10^digits divides 10^max
    return torch.randint(0, 10 ** max_digits, (n,), generator=g, dtype=torch.int64) % (10 ** digits)


def batch_of(x: torch.Tensor, y: torch.Tensor, task: ArithmeticTaskConfig) -> torch.Tensor:
    """Operands (N,), (N,) -> (N, seq_len) token ids (the vectorised :func:`encode`)."""
    n = len(x)
    sym = lambda tok: torch.full((n, 1), tok, dtype=torch.int64)  # noqa: E731
    return torch.cat([reversed_digits(x, task.pad), sym(TIMES), reversed_digits(y, task.pad), sym(EQUALS),
                      reversed_digits(x * y, 2 * task.max_digits)], dim=1)


def sample_batch(n: int, task: ArithmeticTaskConfig, g: torch.Generator, x_digits: int | None = None,
                 y_digits: int | None = None) -> torch.Tensor:
    """(n, seq_len) fresh examples; ``x_digits`` / ``y_digits`` fix an operand's digit count (an accuracy cell)."""
    x = sample_operands(n, x_digits or task.min_digits, x_digits or task.max_digits, g)
    y = sample_operands(n, y_digits or task.min_digits, y_digits or task.max_digits, g)
    return batch_of(x, y, task)


def product_loss(model: torch.nn.Module, batch: torch.Tensor, start: int) -> tuple[torch.Tensor, dict]:
    """Cross-entropy on the product's tokens only (the reference's loss mask): positions start-1 .. T-2 predict
    tokens start .. T-1."""
    logits = model(batch[:, :-1])[:, start - 1:]  # (B, product digits, V)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch[:, start:].reshape(-1)), {}


@torch.no_grad()
def score(model: torch.nn.Module, batch: torch.Tensor, start: int, chunk: int = 512) -> dict[str, float]:
    """Exact-product accuracy (every product token right under teacher forcing = greedy decoding right), the share
    of product tokens right, and the product loss, over ``batch`` (N, T)."""
    model.eval()
    dev = next(model.parameters()).device
    exact = right = 0
    loss = 0.0
    for i in range(0, len(batch), chunk):
        b = batch[i:i + chunk].to(dev)
        logits = model(b[:, :-1])[:, start - 1:].float()  # (b, P, V)
        hit = logits.argmax(-1) == b[:, start:]  # (b, P)
        exact += int(hit.all(1).sum())
        right += int(hit.sum())
        loss += float(F.cross_entropy(logits.transpose(1, 2), b[:, start:], reduction="sum"))
    tokens = batch[:, start:].numel()
    return {"accuracy": exact / len(batch), "token_accuracy": right / tokens, "loss": loss / tokens}


def eval_sets(task: ArithmeticTaskConfig, n: int, seed: int) -> dict[tuple[int, int], torch.Tensor]:
    """(x digits, y digits) -> (n, T) held-out examples for every cell of the accuracy table, each from its own
    seeded stream (the same for every variant of a run)."""
    sets = {}
    for a, b in itertools.product(range(task.min_digits, task.max_digits + 1), repeat=2):
        g = torch.Generator().manual_seed(mix_seed("arithmetic-eval", seed, a, b))
        sets[(a, b)] = sample_batch(n, task, g, a, b)
    return sets


def accuracy_table(model: torch.nn.Module, sets: dict[tuple[int, int], torch.Tensor], start: int) -> dict:
    """Per cell the exact-product accuracy; ``by_digits``: the d × d cells (both operands of d digits, the
    reference's headline cell is max × max); ``accuracy``: the mean over all cells."""
    cells = {f"{a}x{b}": score(model, s, start) for (a, b), s in sets.items()}
    diag = {str(a): cells[f"{a}x{b}"]["accuracy"] for (a, b) in sets if a == b}
    return {"cells": cells, "by_digits": diag,
            "accuracy": sum(c["accuracy"] for c in cells.values()) / len(cells),
            "token_accuracy": sum(c["token_accuracy"] for c in cells.values()) / len(cells)}


def build_model(cfg: ArithmeticConfig) -> GPT:
    torch.manual_seed(cfg.run.seed)  # every variant starts from the same weights
    gcfg = copy.deepcopy(cfg.model)
    gcfg.vocab_size = VOCAB
    return GPT(gcfg)


def run(cfg: ArithmeticConfig, resume: str | None = None) -> dict:
    rt = runtime_for(cfg.run)
    task, start = cfg.task, prompt_len(cfg.task)
    sets = eval_sets(task, cfg.eval_examples, cfg.run.seed)
    g = torch.Generator().manual_seed(mix_seed("arithmetic-curve", cfg.run.seed))
    curve_set = sample_batch(cfg.curve_examples, task, g, task.max_digits, task.max_digits)
    parent = Run.create(cfg.run.out_dir, cfg.run.name, cfg, is_main=rt.is_main)

    def batch_fn(step: int) -> torch.Tensor:
        return sample_batch(cfg.train.batch_size, task, step_generator(cfg.run.seed, step))

    def loss_fn(model: torch.nn.Module, batch: torch.Tensor) -> tuple[torch.Tensor, dict]:
        return product_loss(model, batch, start)

    def eval_fn(model: torch.nn.Module, step: int) -> dict[str, float]:
        s = score(model, to_device(curve_set, rt.device), start)
        return {"accuracy_max_digits": s["accuracy"], "token_accuracy_max_digits": s["token_accuracy"]}

    results: dict = {"task": {"min_digits": task.min_digits, "max_digits": task.max_digits, "pad": task.pad,
                              "seq_len": seq_len(task), "example": decode(sample_batch(1, task, g)[0].tolist())},
                     "steps": cfg.train.steps, "batch_size": cfg.train.batch_size,
                     "examples_seen": cfg.train.steps * cfg.train.batch_size, "eval_examples": cfg.eval_examples,
                     "myopia_horizon": cfg.myopia.horizon, "variants": {}}
    t0 = time.perf_counter()
    for variant in cfg.variants:
        model = build_model(cfg)
        results.setdefault("params", sum(p.numel() for p in model.parameters()))
        if variant != "vanilla":
            make_myopic(model, mode=variant, horizon=cfg.myopia.horizon)
        sub = parent.sub(variant)
        out = train(model, loss_fn, batch_fn, cfg.train, sub, rt, resume=resume, desc=variant,
                    hooks=TrainHooks(eval_fn=eval_fn if cfg.train.eval_every else None),
                    model_config=model.checkpoint_record())
        res = {**accuracy_table(model, sets, start), "train_wall_s": out["wall_s"], "curve": out["curve"],
               "eval_curve": out.get("eval_curve", [])}
        sub.write_results(res)
        results["variants"][variant] = res
    results["wall_s"] = time.perf_counter() - t0
    if rt.is_main:
        parent.write_results(results)
        for v, r in results["variants"].items():
            digits = " ".join(f"{d}x{d}: {a:.3f}" for d, a in r["by_digits"].items())
            print(f"{v}: exact-product accuracy {r['accuracy']:.3f} over all cells; {digits}")
    return results
