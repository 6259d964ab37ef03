"""Benchmark: a Pythia-shaped model (GPT-NeoX, random init) trained vanilla and myopic on WikiText-2 at the `lm`
CPU budget — the paper's scaling family, through the same `myopia lm` command as the GPT benchmark.

The model folder is made once (seeded): Pythia-14M's architecture (GPT-NeoX, 6 layers, d 128, 4 heads, MLP 512,
rotary on a quarter of each head, parallel residual) with the 4k BPE of ``lm_small`` as its vocabulary (saved
beside it), so the data, tokens and budget are those of benchmarks/myopia_lm.py. Then per seed, as two
single-threaded processes side by side, ``myopia lm --config small --base <folder>`` trains vanilla (+ local on the
``--baseline-seeds``) and myopic (+ zero_past). Resumable: finished runs are skipped. The gap (myopic − vanilla)
and the paper's local-myopic bonus (vanilla − local) are paired per seed with a t-interval of the mean. Writes
``benchmarks/results/myopia_pythia_lm.json`` and copies the summary into myopia_families.json (key ``pythia_lm``).

    FORETHOUGHT_DATA=../shared/data python benchmarks/myopia_pythia_lm.py [--seeds 0 1 2] [--steps 800]
    python benchmarks/myopia_pythia_lm.py --quick --runs /tmp/p --out /tmp/o     # generated corpus, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from forethought.experiments import finished_runs, invocations, span_s
from forethought.experiments.jobs import run_queue_or_exit as run_queue
from forethought.experiments.myopia import lm_summary, variant_stats

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "benchmarks" / "results"
RUNS = ROOT / "runs" / "bench-myopia-pythia-lm"
GROUPS = {"a": ["vanilla", "local"], "b": ["detach_hidden", "zero_past"]}
SHAPE = {"hidden_size": 128, "num_hidden_layers": 6, "num_attention_heads": 4, "intermediate_size": 512,
         "use_parallel_residual": True, "max_position_embeddings": 2048, "tie_word_embeddings": False,
         "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}}


def make_model(folder: Path, corpus: str, tokenizer: str, seed: int, shape: dict) -> int:
    """The seeded random-init GPT-NeoX folder (model + the run's tokenizer); returns its parameter count."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from forethought.core.env import cache_dir
    from forethought.data.corpora import load_corpus_text
    from forethought.data.tokenizers import load_tokenizer

    text = load_corpus_text(corpus, "train") if tokenizer.startswith("bpe:") else None
    tok = load_tokenizer(tokenizer, corpus_text=text, cache_dir=cache_dir("") / "tokenizers")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=len(tok), bos_token_id=tok.eos_token_id,
                                                 eos_token_id=tok.eos_token_id, **shape))
    folder.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(folder)
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--baseline-seeds", type=int, nargs="*", default=[0],
                    help="seeds that also train local and zero_past")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--collect-only", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smoke: generated corpus, tiny preset, 4 steps, a tiny model")
    ap.add_argument("--runs", type=Path, default=RUNS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    config, corpus, tokenizer, shape, extra = "small", "wikitext-2", "bpe:4096", dict(SHAPE), []
    if args.quick:
        config, corpus, tokenizer = "tiny", "generated", "bpe:512"
        shape.update(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
        args.steps, args.seeds = 4, args.seeds[:1]
        extra = ["--train.checkpoint_every", "2"]
    elif not args.collect_only and not os.environ.get("FORETHOUGHT_DATA"):
        ap.error("set FORETHOUGHT_DATA to a data root with wikitext-2/ (e.g. ../shared/data)")
    folder = args.runs / "model"
    if not args.collect_only:
        if not (folder / "config.json").is_file():
            n = make_model(folder, corpus, tokenizer, 0, shape)
            print(f"made {folder}: GPT-NeoX, {n / 1e6:.2f}M parameters")
        queue = []
        for seed in args.seeds:
            for group, variants in GROUPS.items():
                variants = variants if seed in args.baseline_seeds else variants[:1]
                name = f"s{seed}-{group}"
                if (args.runs / name / "results.json").is_file():
                    continue
                queue.append((f"bench-myopia-pythia-lm-{name}",
                              [sys.executable, "-m", "forethought.cli", "myopia", "lm", "--config", config,
                               "--base", str(folder), "--data.corpus", corpus, "--data.tokenizer", tokenizer,
                               "--run.out_dir", str(args.runs), "--run.name", name, "--run.seed", str(seed),
                               "--train.steps", str(args.steps), "--resume", "auto",
                               "--variants", "[" + ",".join(variants) + "]", *extra]))
        run_queue(queue, args.jobs, args.runs.parent, ROOT)
    collect(args.runs, args.out, " ".join(["python", "benchmarks/myopia_pythia_lm.py",
                                           *(sys.argv[1:] if argv is None else argv)]))


def collect(runs: Path, out: Path, command: str) -> dict:
    """Every finished run (its folder under ``runs``, else its record archived in ``out``/runs/myopia_pythia_lm,
    committed for the benchmark) into myopia_pythia_lm.json."""
    archive = out / "runs" / "myopia_pythia_lm"
    seen = invocations(archive, command)  # kept beside the archived runs
    loss: dict[str, dict[int, float]] = {}
    setup = None
    records = finished_runs(runs, archive, "s*-[ab]")
    for name, record in records.items():
        r = record["results"]
        seed = int(name[1:].split("-")[0])
        setup = setup or {k: r.get(k) for k in ("corpus", "tokenizer", "seq_len", "steps", "batch_size",
                                                "tokens_seen", "eval_sequences", "params")}
        for variant, x in r["variants"].items():
            loss.setdefault(variant, {})[seed] = x["val_loss"]
    cfg, kept = runs / "model" / "config.json", archive / "model-config.json"
    if cfg.is_file():  # kept beside the archived runs: a fresh machine has no model folder
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(cfg.read_text())
    res: dict = {"command": " ; ".join(seen), "wall_s": span_s(records),
                 "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads_per_run": 1},
                 "model": json.loads(kept.read_text()) if kept.is_file() else None, "setup": setup,
                 "per_seed": {v: {str(s): x for s, x in sorted(d.items())} for v, d in loss.items()}}
    res.update(variant_stats(loss))
    res.update(lm_summary(loss))
    res["paper"] = {"note": "Pythia fine-tunes 14M..2.8B: the gap grows from 160M up, 0.10 -> 0.23 nats "
                            "(Wu et al. 2024); ours is a random-init Pythia-14M-shaped model from scratch"}
    out.mkdir(parents=True, exist_ok=True)
    (out / "myopia_pythia_lm.json").write_text(json.dumps(res, indent=2) + "\n")
    fam = out / "myopia_families.json"
    if fam.is_file():  # the families file carries the summary too
        f = json.loads(fam.read_text())
        f["pythia_lm"] = {k: res.get(k) for k in ("setup", "vanilla_mean", "detach_hidden_mean", "gap_paired",
                                                   "local_myopic_bonus_paired", "gap_over_context")}
        f["pythia_lm"]["source"] = "benchmarks/results/myopia_pythia_lm.json"
        fam.write_text(json.dumps(f, indent=2) + "\n")
    print(json.dumps({k: res.get(k) for k in ("vanilla_mean", "detach_hidden_mean", "gap_paired")}, indent=2))
    return res


if __name__ == "__main__":
    main()
