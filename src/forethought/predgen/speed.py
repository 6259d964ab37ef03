"""``forethought predgen speed``: what PredGen costs, and what three speed-ups measured against their "before" buy,
on one model in one process (so the machine's other load hits both sides of every ratio alike).

1. Training step, PredGen / Generator: the price of scheduled sampling, the roll-out and the adapter. Same model,
   batches and optimizer; the two methods' steps interleaved (their order alternates), AdamW included; medians.
2. The parts of one PredGen step (prompt pass, scheduled sampling, roll-out, continuation, losses, backward,
   optimizer; the profiler labels in ``predgen_loss``), on SST-2 and on a multiple-choice task answered with the
   choice's text.
3. The prompt pass, forward + backward, with full-vocabulary logits at every prompt position (whose loss is
   masked: the earlier code) against the last position's only.
4. Decoding: the KV-cached, batched, constrained greedy decoder against a loop that re-runs the whole sequence
   for every new token (the reference code's way, :func:`rerun_greedy`), the same prompts, trie and constraint.
5. The expected-value decoder over STS-B's numbers 0.00-5.00: the trie walked level by level with the KV cache
   (:func:`forethought.predgen.decoding.answer_distribution`) against the earlier single pass over every deepest
   path (:func:`all_paths_distribution`); examples/s of each and the largest difference of their distributions.
6. Scheduled sampling's own tokens on STS-B (multi-token numbers): a PredGen step with the paper's sequential
   roll-out against the one-pass approximation (``--predgen.own_tokens one_pass``), at p = 0.5 and p = 1.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from forethought.core.env import run_models
from forethought.core.run import Run
from forethought.models.hf import load_causal_lm
from forethought.predgen.config import AdapterConfig, PredGenSettings, PromptConfig, SpeedConfig, TaskConfig
from forethought.predgen.data import load_split
from forethought.predgen.decoding import (
    AnswerTrie,
    answer_distribution,
    constrained_greedy,
    continue_pass,
    position_ids,
    prompt_pass,
)
from forethought.predgen.methods import Encoder, generator_loss, predgen_loss, with_sampling
from forethought.predgen.model import PredGenModel, apply_adapter, build_head, hidden_size

DECODE_TOKENS = 8  # the decoders' answers: 7 random tokens + EOS
DECODE_ANSWERS = 32


# ------------------------------------------------------------------------------------------- the "before" sides


@torch.no_grad()
def rerun_greedy(lm: Any, trie: AnswerTrie, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The reference code's decoder: every new token re-runs the whole sequence (no cache), constrained to
    ``trie`` like ours. ids, mask: (B, T) left-padded prompts -> (B, m) tokens."""
    B = ids.shape[0]
    nodes = [trie.root] * B
    out = []
    for _ in range(trie.depth):
        logits = lm(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask)).logits[:, -1]  # (B, V)
        allowed = torch.zeros_like(logits, dtype=torch.bool)
        for b, n in enumerate(nodes):
            allowed[b, n.allowed] = True
        tok = logits.masked_fill(~allowed, -torch.inf).argmax(-1)
        out.append(tok)
        nodes = [n.children[int(t)] for n, t in zip(nodes, tok, strict=True)]
        if all(n.leaf is not None for n in nodes):
            break
        ids = torch.cat([ids, tok[:, None]], dim=1)
        mask = torch.cat([mask, mask.new_ones(B, 1)], dim=1)
    return torch.stack(out, 1)


@torch.no_grad()
def all_paths_distribution(lm: Any, trie: AnswerTrie, ids: torch.Tensor, mask: torch.Tensor, chunk: int = 64,
                           max_rows: int = 256) -> torch.Tensor:
    """The expected-value decoder before the level walk: every deepest internal path of the trie fed in full
    after the tiled prompt cache (for " d.dd": 51 paths of 4 tokens), each internal node's children read off the
    first path through it. The same distribution as ``answer_distribution``, more tokens fed.
    ids, mask: (B, T) -> (B, candidates) probabilities."""
    pp = prompt_pass(lm, ids, mask)
    B = ids.shape[0]
    inner = trie.internal_nodes()
    node_of = {tuple(p): n for p, n in inner}
    deepest = [p for p, n in inner if all(not c.children for c in n.children.values())]
    pieces = {(): [F.log_softmax(pp.last_logits.double(), -1)[:, trie.root.allowed]]}
    g = max(1, max_rows // min(chunk, len(deepest)))  # examples per forward
    for b0 in range(0, B, g):
        b1 = min(B, b0 + g)
        seen: set[tuple[int, ...]] = set()  # each node is read off the first path through it
        for s in range(0, len(deepest), chunk):
            paths = deepest[s:s + chunk]
            n, m = len(paths), max(len(p) for p in paths)
            path_ids = torch.zeros(n, m, dtype=torch.long)
            for i, p in enumerate(paths):
                path_ids[i, :len(p)] = torch.tensor(p)
            kv = [(k[b0:b1].repeat_interleave(n, 0), v[b0:b1].repeat_interleave(n, 0)) for k, v in pp.kv]
            logits, _ = continue_pass(lm, kv, mask[b0:b1].repeat_interleave(n, 0), path_ids.repeat(b1 - b0, 1))
            lp = F.log_softmax(logits.view(b1 - b0, n, m, -1).float(), -1)  # (b, n, m, V)
            for i, p in enumerate(paths):
                for j in range(1, len(p) + 1):
                    key = tuple(p[:j])
                    if key not in seen:
                        seen.add(key)
                        pieces.setdefault(key, []).append(lp[:, i, j - 1][:, node_of[key].allowed].double())
    child_lp = {k: torch.cat(v) for k, v in pieces.items()}
    scores = torch.zeros(B, len(trie.sequences), dtype=torch.float64)
    for c, seq in enumerate(trie.sequences):
        for j, tok in enumerate(seq):
            node = node_of[tuple(seq[:j])]
            scores[:, c] += child_lp[tuple(seq[:j])][:, int((node.allowed == tok).nonzero())]
    return torch.softmax(scores, dim=-1)


# ------------------------------------------------------------------------------------------------ the timings


def _predgen_step(model: PredGenModel, batch: dict[str, Any], enc: Encoder,
                  settings: PredGenSettings | None = None) -> torch.Tensor:
    task_type = enc.spec.task_type
    return model(predgen_loss, batch, settings or PredGenSettings(), enc, task_type, -1, True)[0].value()


def _generator_step(model: PredGenModel, batch: dict[str, Any], enc: Encoder) -> torch.Tensor:
    return model(generator_loss, batch, True)[0].value()


def _timed_step(model: PredGenModel, opt: torch.optim.Optimizer, loss_of: Callable[..., torch.Tensor],
                *args: Any) -> float:
    """Seconds of one training step of ``model``: ``loss_of(model, *args)``, its backward and the optimizer step."""
    model.train()
    t0 = time.perf_counter()
    loss = loss_of(model, *args)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return time.perf_counter() - t0


def train_step_times(models: dict[str, PredGenModel], opt: torch.optim.Optimizer, enc: Encoder, items: list,
                     steps: int, batch_size: int) -> tuple[dict[str, float], list[float]]:
    """Median seconds of a Generator and a PredGen training step (forward, backward, AdamW) over ``steps``
    batches after two warm-up ones, the two interleaved on the same batch in alternating order; and each batch's
    mean prompt length."""
    times: dict[str, list[float]] = {"generator": [], "predgen": []}
    prompt_lens = []
    for step in range(steps + 2):
        batch = with_sampling(enc.collate(items[step * batch_size:(step + 1) * batch_size]), 0.5, step)
        prompt_lens.append(float(batch["prompt_mask"].sum(1).float().mean()))
        for name in ("generator", "predgen") if step % 2 == 0 else ("predgen", "generator"):
            seconds = _timed_step(models[name], opt, _generator_step if name == "generator" else _predgen_step,
                                  batch, enc)
            if step >= 2:
                times[name].append(seconds)
        print(f"step {step}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items() if v), flush=True)
    return {k: statistics.median(v) for k, v in times.items()}, prompt_lens


def own_tokens_times(model: PredGenModel, opt: torch.optim.Optimizer, enc: Encoder, items: list, steps: int,
                     batch_size: int, ps: tuple[float, ...] = (0.5, 1.0)) -> dict[str, Any]:
    """Median seconds of a PredGen training step (forward, backward, AdamW) with the model's own tokens fed by
    the sequential roll-out (the paper's) and by the one-pass approximation, at each scheduled-sampling
    probability in ``ps``: the two forms interleaved on the same batch in alternating order, ``steps`` batches
    after one warm-up; and the roll-out's time over the one-pass form's."""
    forms = {"rollout": PredGenSettings(own_tokens="rollout"), "one_pass": PredGenSettings(own_tokens="one_pass")}
    out: dict[str, Any] = {}
    for p in ps:
        times: dict[str, list[float]] = {k: [] for k in forms}
        for step in range(steps + 1):
            batch = with_sampling(enc.collate(items[step * batch_size:(step + 1) * batch_size]), p, step)
            for name in forms if step % 2 == 0 else reversed(list(forms)):
                seconds = _timed_step(model, opt, _predgen_step, batch, enc, forms[name])
                if step >= 1:
                    times[name].append(seconds)
        med = {k: statistics.median(v) for k, v in times.items()}
        out[f"p={p:g}"] = {"rollout_s": med["rollout"], "one_pass_s": med["one_pass"],
                           "ratio": med["rollout"] / med["one_pass"]}
    return out


def step_parts(model: PredGenModel, opt: torch.optim.Optimizer, enc: Encoder, items: list,
               steps: int) -> dict[str, float]:
    """Median seconds of each part of a PredGen step over ``steps`` steps on one batch (after a warm-up): the
    forward's parts (the profiler labels ``predgen.*`` in predgen_loss), backward and the optimizer step; and the
    examples/s of the whole step."""
    from torch.profiler import ProfilerActivity, profile

    batch = with_sampling(enc.collate(items), 0.5, 0)
    rows: dict[str, list[float]] = {}
    for i in range(steps + 1):
        model.train()
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            loss = _predgen_step(model, batch, enc)
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if i == 0:
            continue  # warm-up
        for ev in prof.key_averages():
            if ev.key.startswith("predgen."):
                rows.setdefault(ev.key.removeprefix("predgen."), []).append(ev.cpu_time_total / 1e6)
        for name, v in (("forward_total", t1 - t0), ("backward", t2 - t1), ("optimizer", t3 - t2),
                        ("step", t3 - t0)):
            rows.setdefault(name, []).append(v)
    out = {k: statistics.median(v) for k, v in rows.items()}
    out["examples_per_s"] = len(items) / out["step"]
    out["answer_tokens_max"] = int(batch["answer_mask"].sum(1).max())
    out["prompt_tokens_mean"] = float(batch["prompt_mask"].sum(1).float().mean())
    return out


def prompt_logits_waste(lm: Any, batch: dict[str, Any], steps: int) -> dict[str, float]:
    """Median seconds of the prompt pass, forward + backward, with full-vocabulary logits at every prompt
    position (before) and at the last one only (after), interleaved; the loss reads the last position either
    way."""
    out: dict[str, list[float]] = {"all_positions": [], "last_position": []}
    for i in range(steps + 1):
        for name in ("all_positions", "last_position") if i % 2 == 0 else ("last_position", "all_positions"):
            t0 = time.perf_counter()
            pp = prompt_pass(lm, batch["prompt_ids"], batch["prompt_mask"], all_logits=name == "all_positions")
            pp.last_logits.float().logsumexp(-1).sum().backward()
            if i:
                out[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in out.items()}
    n = batch["prompt_ids"].shape[0]
    return {"s_all_positions": med["all_positions"], "s_last_position": med["last_position"],
            "examples_per_s_before": n / med["all_positions"], "examples_per_s_after": n / med["last_position"],
            "speedup": med["all_positions"] / med["last_position"]}


def decode_rates(lm: Any, enc: Encoder, batches: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    """Examples/s of the cached decoder and of :func:`rerun_greedy` on ``batches``, under a trie of
    DECODE_ANSWERS random answers of DECODE_TOKENS tokens, and how many decoded tokens differ between them."""
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(100, len(enc.tok), (DECODE_TOKENS - 1,), generator=g).tolist() + [enc.eos_id]
            for _ in range(DECODE_ANSWERS)]
    trie = AnswerTrie(seqs, list(range(DECODE_ANSWERS)))
    n = sum(b["prompt_ids"].shape[0] for b in batches)
    rates, outs = {}, {}
    for name in ("cached", "rerun"):
        t0 = time.perf_counter()
        if name == "cached":
            outs[name] = [constrained_greedy(lm, trie, b["prompt_ids"], b["prompt_mask"]).tokens for b in batches]
        else:
            outs[name] = [rerun_greedy(lm, trie, b["prompt_ids"], b["prompt_mask"]) for b in batches]
        rates[name] = n / (time.perf_counter() - t0)
    mismatched = sum(int((a != b).sum()) if a.shape == b.shape else a.numel()
                     for a, b in zip(outs["cached"], outs["rerun"], strict=True))
    return {"generated_tokens": DECODE_TOKENS, "examples": n, "examples_per_s_cached": rates["cached"],
            "examples_per_s_rerun": rates["rerun"], "mismatched_tokens": mismatched, "same_tokens": mismatched == 0}


def expected_value_rates(lm: Any, enc: Encoder, batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Examples/s of :func:`all_paths_distribution` (before) and ``answer_distribution`` (after) over the
    number trie of ``enc`` on ``batches``, the tokens each feeds per example, and their largest difference."""
    trie = enc.number_trie
    n = sum(b["prompt_ids"].shape[0] for b in batches)
    rates, dists = {}, {}
    for name, fn in (("all_paths", all_paths_distribution), ("level_walk", answer_distribution)):
        t0 = time.perf_counter()
        dists[name] = torch.cat([fn(lm, trie, b["prompt_ids"], b["prompt_mask"]) for b in batches])
        rates[name] = n / (time.perf_counter() - t0)
    inner = trie.internal_nodes()
    return {"examples": n, "candidates": len(trie.sequences),
            "tokens_fed_per_example_before": sum(len(p) for p, node in inner
                                                 if all(not c.children for c in node.children.values())),
            "tokens_fed_per_example_after": sum(1 for p, _ in inner if p),
            "examples_per_s_before": rates["all_paths"], "examples_per_s_after": rates["level_walk"],
            "speedup": rates["level_walk"] / rates["all_paths"],
            "max_abs_difference": float((dists["all_paths"] - dists["level_walk"]).abs().max())}


def _prompt_batches(enc: Encoder, examples: list, batch_size: int) -> list[dict[str, Any]]:
    items = enc.encode(examples)
    return [enc.collate([{"prompt": i["prompt"]} for i in items[k:k + batch_size]])
            for k in range(0, len(items), batch_size)]


@run_models()  # env.json names the models this run loads, not an earlier run's
def run(cfg: SpeedConfig, resume: str | None = None) -> dict[str, Any]:
    seed = cfg.run.seed
    spec, train_ex, eval_ex = load_split(TaskConfig(name="sst2"), seed)
    text_split = load_split(TaskConfig(name=cfg.text_task, answer="text"), seed) if cfg.text_task else None
    stsb, stsb_train, stsb_eval = load_split(TaskConfig(name="stsb"), seed)
    lm, tok = load_causal_lm(cfg.base)
    enc = Encoder(spec, tok, PromptConfig())
    torch.manual_seed(seed)
    lm = apply_adapter(lm, AdapterConfig(method="lora", r=16, alpha=32), 100)
    d = hidden_size(lm)
    lora = [p for p in lm.parameters() if p.requires_grad]

    def predgen_on(task: Encoder) -> tuple[PredGenModel, torch.optim.Optimizer]:
        """A PredGen model over the shared LoRA'd ``lm`` with an attention adapter for ``task``, and its AdamW."""
        model = PredGenModel(lm, build_head("predgen", d, task.n_out, "attention", 256, None))
        return model, torch.optim.AdamW(lora + list(model.head.parameters()), lr=1e-4)

    predgen, opt = predgen_on(enc)  # the Generator shares the LoRA and this optimizer
    models = {"generator": PredGenModel(lm, None), "predgen": predgen}
    out = Run.create(cfg.run.out_dir, cfg.run.name, cfg).start()

    items = enc.encode(train_ex[:cfg.batch_size * (cfg.steps + 2)])
    med, prompt_lens = train_step_times(models, opt, enc, items, cfg.steps, cfg.batch_size)
    parts = {"sst2": step_parts(models["predgen"], opt, enc, items[:cfg.batch_size], cfg.parts_steps)}
    if text_split is not None:  # a multi-token task: answers written as the choice's text
        tspec, ttrain, _ = text_split
        tenc = Encoder(tspec, tok, PromptConfig())
        tmodel, topt = predgen_on(tenc)
        parts[f"{cfg.text_task} (text answers)"] = step_parts(tmodel, topt, tenc, tenc.encode(ttrain[:cfg.batch_size]),
                                                              cfg.parts_steps)
    waste = prompt_logits_waste(lm, enc.collate(items[:cfg.batch_size]), cfg.parts_steps)
    # the roll-out against the one-pass approximation on multi-token answers (STS-B's numbers)
    senc = Encoder(stsb, tok, PromptConfig())
    smodel, sopt = predgen_on(senc)
    own = own_tokens_times(smodel, sopt, senc, senc.encode(stsb_train[:cfg.batch_size * (cfg.parts_steps + 1)]),
                           cfg.parts_steps, cfg.batch_size)

    lm.eval()
    decode = decode_rates(lm, enc, _prompt_batches(enc, eval_ex[:cfg.decode_examples], cfg.batch_size), seed)
    ev = expected_value_rates(lm, senc, _prompt_batches(senc, stsb_eval[:cfg.ev_examples], cfg.batch_size))
    results = {
        "model": f"{cfg.base} + LoRA r=16 (all linear layers)", "batch_size": cfg.batch_size,
        "prompt_tokens_mean": statistics.fmean(prompt_lens), "train_step_s": med,
        "train_step_ratio": med["predgen"] / med["generator"], "train_steps_timed": cfg.steps,
        "decode": decode, "decode_speedup": decode["examples_per_s_cached"] / decode["examples_per_s_rerun"],
        "prompt_logits": waste, "expected_value_decoder": ev, "expected_value_speedup": ev["speedup"],
        "predgen_step_parts_s": parts, "own_tokens_step_s": own,
        "notes": "training: SST-2 train prompts, label-word answers (+EOS), PredGen with p=0.5, the roll-out and "
                 "the attention adapter, AdamW step included, the two methods interleaved in one process. "
                 "Roll-out against one pass: STS-B train prompts (numbers of several tokens), the two forms "
                 "interleaved on the same batches, PredGen's other settings as in training. "
                 f"Decoding: SST-2 dev prompts, a trie of {DECODE_ANSWERS} random {DECODE_TOKENS}-token answers "
                 f"({DECODE_TOKENS - 1} tokens + EOS), greedy. Expected value: STS-B dev prompts, every number "
                 "0.00-5.00."}
    out.write_results(results)
    print(f"train step predgen / generator {results['train_step_ratio']:.2f}; decoding cached / re-run "
          f"{results['decode_speedup']:.2f} (mismatched tokens {decode['mismatched_tokens']}); prompt logits "
          f"last only x{waste['speedup']:.2f}; expected value level walk x{ev['speedup']:.2f} (max difference "
          f"{ev['max_abs_difference']:.1e}); roll-out / one pass "
          + ", ".join(f"{k} {v['ratio']:.2f}" for k, v in own.items()))
    return results
