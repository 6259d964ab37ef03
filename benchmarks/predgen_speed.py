"""Benchmark: what PredGen costs. (1) Training step time, PredGen / Generator — the price of scheduled
sampling, the roll-out and the adapter — same model, batch and process, steps interleaved, medians.
(1b) The parts of one PredGen step (prompt pass, teacher-forced pass, roll-out, continuation, losses,
backward, optimizer), profiled, on SST-2 and on ARC-Easy answered with the choice's text.
(2) Inference: our KV-cached, batched, constrained greedy decoder vs a loop that re-runs the full sequence for
every new token (as the reference code did), the same batches and the same constraint, 8 generated tokens.

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
sys.path.insert(0, str(ROOT / "src"))
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
        "predgen_step_parts_s": {"sst2": parts, **({args.text_task + " (text answers)": text_parts}
                                                   if text_parts else {})},
        "notes": "training: SST-2 train prompts, label-word answers (+EOS), PredGen with p=0.5, the roll-out "
                 "and the attention adapter, AdamW step included, the two methods interleaved in one process. "
                 "Decoding: SST-2 dev prompts, a trie of 32 random 8-token answers (7 tokens + EOS), greedy.",
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "predgen_speed.json").write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: res[k] for k in ("train_step_s", "train_step_ratio", "decode", "decode_speedup")}, indent=1))


if __name__ == "__main__":
    main()
