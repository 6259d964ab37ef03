"""Benchmark: what PredGen costs. (1) Training step time, PredGen / Generator — the price of scheduled
sampling, the roll-out and the adapter — same model, batch and process, steps interleaved, medians.
(1b) The parts of one PredGen step (prompt pass, teacher-forced pass, roll-out, continuation, losses,
backward, optimizer), profiled, on SST-2 and on ARC-Easy answered with the choice's text.
(1c) The waste removed from the prompt pass: full-vocabulary logits at every prompt position (whose loss is
masked) vs the last position's only, forward + backward on the same batch.
(2) Inference: our KV-cached, batched, constrained greedy decoder vs a loop that re-runs the full sequence for
every new token (as the reference code did), the same batches and the same constraint, 8 generated tokens.
(3) The expected-value decoder (regression, STS-B's numbers 0.00-5.00): the trie walked level by level with the
KV cache (forethought.predgen.decoding.answer_distribution) vs the earlier single pass over every deepest
path (kept here as ``all_paths_distribution``), the same prompts; examples/s before and after, and the largest
difference between their distributions.

    python benchmarks/predgen_speed.py [--steps 12] [--batch 16] [--threads 2]

Writes ``benchmarks/results/predgen_speed.json`` (top-level ``train_step_ratio`` and ``decode_speedup``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"


@torch.no_grad()
def rerun_greedy(lm, trie, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    """The reference code's way: every new token re-runs the whole sequence (no cache), constrained like ours."""
    from forethought.predgen.decoding import position_ids

    B = ids.shape[0]
    nodes = [trie.root] * B
    out = []
    for _ in range(trie.depth):
        logits = lm(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask)).logits[:, -1]
        allowed = torch.zeros_like(logits, dtype=torch.bool)
        for b, n in enumerate(nodes):
            allowed[b, n.allowed] = True
        tok = logits.masked_fill(~allowed, -torch.inf).argmax(-1)
        out.append(tok)
        nodes = [n.children[int(t)] for n, t in zip(nodes, tok)]
        if all(n.leaf is not None for n in nodes):
            break
        ids = torch.cat([ids, tok[:, None]], dim=1)
        mask = torch.cat([mask, mask.new_ones(B, 1)], dim=1)
    return torch.stack(out, 1)


@torch.no_grad()
def all_paths_distribution(lm, trie, ids: torch.Tensor, mask: torch.Tensor, chunk: int = 64,  # noqa: ANN001
                           max_rows: int = 256) -> torch.Tensor:
    """The expected-value decoder before the level walk: every deepest internal path of the trie fed in full
    after the tiled prompt cache (for " d.dd": 51 paths of 4 tokens), each internal node's children read off the
    first path through it. Same result as answer_distribution, more tokens fed."""
    import torch.nn.functional as F

    from forethought.predgen.decoding import continue_pass, prompt_pass

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


def prompt_logits_waste(lm, batch: dict, steps: int) -> dict:  # noqa: ANN001
    """Median seconds of the prompt pass, forward + backward, with full-vocabulary logits at every prompt
    position (before) and at the last one only (after); the loss reads the last position either way."""
    from forethought.predgen.decoding import prompt_pass

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


def step_parts(model, opt, enc, items: list, steps: int) -> dict:  # noqa: ANN001
    """Median seconds of each part of a PredGen step over ``steps`` steps on one batch: the forward's parts (the
    profiler labels in predgen_loss), backward and the optimizer step; and the examples/s of the whole step."""
    from torch.profiler import ProfilerActivity, profile

    from forethought.predgen.methods import PredGenSettings, predgen_loss, with_sampling

    batch = with_sampling(enc.collate(items), 0.5, 0)
    rows: dict[str, list[float]] = {}
    for i in range(steps + 1):
        model.train()
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            loss = model(predgen_loss, batch, PredGenSettings(), enc, "classification", -1, True)[0].value()
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=12, help="timed training steps per method (after 2 warm-up)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--decode-examples", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--base", default="smollm2-135m")
    ap.add_argument("--parts-steps", type=int, default=4, help="steps timed part by part (profiled)")
    ap.add_argument("--text-task", default="arc-easy", help="also time the parts on this task's text answers "
                    "('' = skip)")
    ap.add_argument("--ev-examples", type=int, default=32, help="STS-B dev prompts for the expected-value decoder")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_start = time.time()
    from forethought.core.config import load_config
    from forethought.models.hf import load_causal_lm
    from forethought.predgen.config import PredGenConfig, TaskConfig
    from forethought.predgen.data import load_split
    from forethought.predgen.decoding import AnswerTrie, constrained_greedy
    from forethought.predgen.methods import (
        Encoder,
        PredGenSettings,
        PromptConfig,
        generator_loss,
        predgen_loss,
        with_sampling,
    )
    from forethought.predgen.model import AdapterConfig, PredGenModel, apply_adapter, build_head, hidden_size

    cfg = load_config(PredGenConfig, None, ["--task.name=sst2", "--task.max_eval_examples=0"])
    spec, train_ex, eval_ex = load_split(cfg.task, cfg.run.seed)
    lm, tok = load_causal_lm(args.base)
    enc = Encoder(spec, tok, PromptConfig())
    torch.manual_seed(0)
    lm = apply_adapter(lm, AdapterConfig(method="lora", r=16, alpha=32), 100)
    d = hidden_size(lm)
    models = {"generator": PredGenModel(lm, None),
              "predgen": PredGenModel(lm, build_head("predgen", d, enc.n_out, "attention", 256, None))}
    params = [p for p in lm.parameters() if p.requires_grad] + list(models["predgen"].head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    items = enc.encode(train_ex[:args.batch * (args.steps + 2)])
    times: dict[str, list[float]] = {"generator": [], "predgen": []}
    prompt_lens = []
    for step in range(args.steps + 2):
        batch = with_sampling(enc.collate(items[step * args.batch:(step + 1) * args.batch]), 0.5, step)
        prompt_lens.append(int(batch["prompt_mask"].sum(1).float().mean()))
        for name in ("generator", "predgen") if step % 2 == 0 else ("predgen", "generator"):
            m = models[name]
            m.train()
            t0 = time.perf_counter()
            if name == "generator":
                loss = m(generator_loss, batch, True)[0].value()
            else:
                loss = m(predgen_loss, batch, PredGenSettings(), enc, "classification", -1, True)[0].value()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if step >= 2:
                times[name].append(time.perf_counter() - t0)
        print(f"step {step}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items() if v), flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    parts = step_parts(models["predgen"], opt, enc, items[:args.batch], args.parts_steps)
    text_parts = None
    if args.text_task:  # a multi-token task: ARC-Easy answered with the choice's text
        tspec, ttrain, _ = load_split(TaskConfig(name=args.text_task, answer="text"), 0)
        tenc = Encoder(tspec, tok, PromptConfig())
        tmodel = PredGenModel(lm, build_head("predgen", d, tenc.n_out, "attention", 256, None))
        topt = torch.optim.AdamW([p for p in lm.parameters() if p.requires_grad] + list(tmodel.head.parameters()),
                                 lr=1e-4)
        text_parts = step_parts(tmodel, topt, tenc, tenc.encode(ttrain[:args.batch]), args.parts_steps)

    waste = prompt_logits_waste(lm, enc.collate(items[:args.batch]), args.parts_steps)

    # Inference: 8 generated tokens (7 answer tokens + EOS) under the same constraint for both decoders.
    g = torch.Generator().manual_seed(0)
    vocab = len(tok)
    seqs = [torch.randint(100, vocab, (7,), generator=g).tolist() + [enc.eos_id] for _ in range(32)]
    trie = AnswerTrie(seqs, list(range(32)))
    lm.eval()
    ev = enc.encode(eval_ex[:args.decode_examples])
    batches = [enc.collate([{"prompt": i["prompt"]} for i in ev[k:k + args.batch]])
               for k in range(0, len(ev), args.batch)]
    rates = {}
    for name in ("cached", "rerun"):
        t0 = time.perf_counter()
        outs = []
        for b in batches:
            if name == "cached":
                outs.append(constrained_greedy(lm, trie, b["prompt_ids"], b["prompt_mask"]).tokens)
            else:
                outs.append(rerun_greedy(lm, trie, b["prompt_ids"], b["prompt_mask"]))
        rates[name] = len(ev) / (time.perf_counter() - t0)
        if name == "cached":
            cached_out = outs
        else:
            same = all(torch.equal(a, b) for a, b in zip(cached_out, outs))
    # The expected-value decoder on STS-B's number trie, before (all paths) and after (level walk).
    from forethought.predgen.decoding import answer_distribution

    sspec, _, seval = load_split(TaskConfig(name="stsb"), 0)
    senc = Encoder(sspec, tok, PromptConfig())
    sev = senc.encode(seval[:args.ev_examples])
    sbatches = [senc.collate([{"prompt": i["prompt"]} for i in sev[k:k + args.batch]])
                for k in range(0, len(sev), args.batch)]
    ev_rates, dists = {}, {}
    for name in ("all_paths", "level_walk"):
        t0 = time.perf_counter()
        fn = all_paths_distribution if name == "all_paths" else answer_distribution
        dists[name] = torch.cat([fn(lm, senc.number_trie, b["prompt_ids"], b["prompt_mask"]) for b in sbatches])
        ev_rates[name] = len(sev) / (time.perf_counter() - t0)
    inner = senc.number_trie.internal_nodes()
    expected_value = {
        "examples": len(sev), "candidates": len(senc.number_trie.sequences),
        "tokens_fed_per_example_before": sum(len(p) for p, n in inner
                                             if all(not c.children for c in n.children.values())),
        "tokens_fed_per_example_after": sum(1 for p, _ in inner if p),
        "examples_per_s_before": ev_rates["all_paths"], "examples_per_s_after": ev_rates["level_walk"],
        "speedup": ev_rates["level_walk"] / ev_rates["all_paths"],
        "max_abs_difference": float((dists["all_paths"] - dists["level_walk"]).abs().max())}
    res = {
        "command": " ".join(["python", *sys.argv]),
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "torch_threads": args.threads},
        "wall_s": time.time() - t_start,
        "model": f"{args.base} + LoRA r=16 (all linear layers)",
        "batch_size": args.batch,
        "prompt_tokens_mean": statistics.fmean(prompt_lens),
        "train_step_s": med,
        "train_step_ratio": med["predgen"] / med["generator"],
        "train_steps_timed": args.steps,
        "decode": {"generated_tokens": 8, "examples": len(ev), "examples_per_s_cached": rates["cached"],
                   "examples_per_s_rerun": rates["rerun"], "same_tokens": same},
        "decode_speedup": rates["cached"] / rates["rerun"],
        "prompt_logits": waste,
        "expected_value_decoder": expected_value,
        "expected_value_speedup": expected_value["speedup"],
        "predgen_step_parts_s": {"sst2": parts, **({args.text_task + " (text answers)": text_parts}
                                                   if text_parts else {})},
        "notes": "training: SST-2 train prompts, label-word answers (+EOS), PredGen with p=0.5, the roll-out "
                 "and the attention adapter, AdamW step included, the two methods interleaved in one process. "
                 "Decoding: SST-2 dev prompts, a trie of 32 random 8-token answers (7 tokens + EOS), greedy. "
                 "Expected value: STS-B dev prompts, every number 0.00-5.00.",
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "predgen_speed.json").write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: res[k] for k in ("train_step_s", "train_step_ratio", "decode", "decode_speedup",
                                          "prompt_logits", "expected_value_decoder")}, indent=1))


if __name__ == "__main__":
    main()
