"""Benchmark (issue 14, beyond the paper): prompted PSF sampling on the planted corpus — a prompt-conditioned flow
prior (``prior.model.conditioning known_mask``) against replacement on the unconditional prior.

Training, per seed (run folders under ``--runs``, default ``runs/bench-psf-prompted/``; each resumable and skipped
when finished): ``seed<S>-none/`` is ``forethought psf recipe`` on the planted corpus (the base model stage, then
the unconditional prior); ``seed<S>-known_mask/`` is the same recipe with the conditioned prior. Its base stage is
a copy of ``seed<S>-none/base/`` — the model stages are a pure function of the seed and their settings (bit-
identical on the CPU when retrained), so only the prior is trained again, on the same model's states.

Evaluation: the first ``--prompts`` documents of the planted **test** split (never trained on); for each
``--prompt-blocks`` m their first m blocks are the prompt, and every method writes one continuation per prompt
(decoder temperature 1, no nucleus: the models' own distributions; the prior's 50 Euler steps):

- ``replace``: the unconditional prior, the prompt's states fixed by replacement (today's prompted sampling);
- ``conditioned``: the conditioned prior, the prompt's states as its input and also replaced in x_t;
- ``conditioned_no_replace``: the conditioned prior, the prompt's states as its input only;
- ``true``: the test documents' own continuations (what a perfect model's samples score on average).

Scores (``forethought.psf.scores.prompted_scores``, the true generator's forward-backward):
``junction_stay`` = p(z_{m+1} = z_m | x), to be compared with ``stay_prob`` (chance: 1/M); ``continuation_nll``
= the exact NLL per token of the continuation given the prompt; ``continuation_persistence`` = the posterior
fraction of consecutive continued block pairs that keep their topic (vs ``stay_prob``). Per seed and m: the
mean over prompts with a 95 % bootstrap interval over prompts, and paired bootstrap intervals (the same prompts)
of each method minus ``replace``. Over seeds: mean ± std and the Student-t 95 % interval of the seed-mean
difference. ``unprompted`` adds each prior's unconditional samples (the conditioned prior with the all-zero
mask): the exact NLL per token of whole documents and their persistence, to show what conditioning costs there.

Writes ``--out`` (default ``benchmarks/results/psf_prompted.json``: command, machine, wall time, settings,
per-seed and over-seed results) and prints a markdown table.

    python benchmarks/psf_prompted.py [--seeds 0 1 2] [--prompts 512] [--prompt-blocks 1 2 4 6]
        [--preset full|tiny] [--collect-only] [-- recipe overrides]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]

from forethought import cli  # noqa: E402
from forethought.core.errors import ForethoughtError  # noqa: E402
from forethought.core.io import atomic_write_json  # noqa: E402
from forethought.core.run import environment  # noqa: E402
from forethought.data.planted import build_generator, persistence, planted_split, token_nll  # noqa: E402
from forethought.eval.stats import resample_indices, seed_mean_difference  # noqa: E402,E501
from forethought.psf.generate import load_recipe, sample_psf  # noqa: E402
from forethought.psf.prompted import METRICS, check_prompt_blocks, prompted_continuations, summary  # noqa: E402
from forethought.psf.sampling import device_generator  # noqa: E402

CONDITIONING = ("none", "known_mask")
METHODS = ("true", "replace", "conditioned", "conditioned_no_replace")
# Recipe settings (on top of --config tiny), chosen before any result: the planted defaults (8 topics, 64 ids,
# 8 blocks of 8 tokens), a small model that trains in minutes on one thread, the base stage only (states,
# no landing or codes: the comparison is between priors), a prior of the benchmark's usual 50 Euler steps.
PRESETS: dict[str, dict[str, Any]] = {
    "full": {"runs": ROOT / "runs" / "bench-psf-prompted", "out": ROOT / "benchmarks" / "results" /
             "psf_prompted.json", "prompts": 512, "prompt_blocks": [1, 2, 4, 6], "seeds": [0, 1, 2],
             "n_boot": 2000, "recipe": [
                 "--data.corpus", "planted", "--data.eval_sequences", "128",
                 "--model.seq_len", "64", "--model.blocks", "8", "--model.n_embd", "64", "--model.enc_layers", "2",
                 "--model.dec_layers", "2", "--model.n_head", "4", "--model.code_dim", "16",
                 "--base.train.steps", "800", "--base.train.batch_size", "32", "--base.train.lr", "2e-3",
                 "--base.train.warmup_steps", "50", "--base.train.log_every", "100",
                 "--base.train.checkpoint_every", "400",
                 "--prior.model.n_embd", "96", "--prior.model.n_layer", "3", "--prior.model.n_head", "4",
                 "--prior.model.steps", "50", "--prior.model.stats_sequences", "512",
                 "--prior.train.steps", "800", "--prior.train.batch_size", "64", "--prior.train.lr", "1e-3",
                 "--prior.train.warmup_steps", "50", "--prior.train.log_every", "100",
                 "--prior.train.checkpoint_every", "400"]},
    "tiny": {"runs": ROOT / "runs" / "bench-psf-prompted-tiny", "out": ROOT / "benchmarks" / "results" /
             "psf_prompted_tiny.json", "prompts": 8, "prompt_blocks": [1, 2], "seeds": [0], "n_boot": 100,
             "recipe": [
                 "--data.corpus", "planted", "--data.planted.blocks", "4", "--data.planted.block_tokens", "8",
                 "--data.planted.vocab_size", "32", "--data.planted.topic_vocab", "12", "--data.planted.topics",
                 "4", "--data.planted.train_documents", "256", "--data.planted.valid_documents", "32",
                 "--data.planted.test_documents", "16", "--prior.model.steps", "4"]},
}
COMMON = ["--landing.enabled", "false", "--self_realized.enabled", "false", "--codes.enabled", "false",
          "--longer_blocks.blocks", "[]", "--baselines", "[]"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="full", help="sizes (tiny: the smoke test)")
    ap.add_argument("--runs", type=Path, help="run folder root (default per preset)")
    ap.add_argument("--out", type=Path, help="results JSON (default per preset)")
    ap.add_argument("--seeds", type=int, nargs="+", help="training seeds (default per preset)")
    ap.add_argument("--prompts", type=int, help="test documents used as prompts (default per preset)")
    ap.add_argument("--prompt-blocks", type=int, nargs="+", help="prompt lengths m in blocks (default per preset)")
    ap.add_argument("--n-boot", type=int, help="bootstrap resamples (default per preset)")
    ap.add_argument("--batch-size", type=int, default=128, help="sampling batch")
    ap.add_argument("--collect-only", action="store_true", help="evaluate finished runs only")
    ap.add_argument("overrides", nargs="*", help="further recipe overrides (after --)")
    args = ap.parse_args(argv)
    p = PRESETS[args.preset]
    for key in ("runs", "out", "seeds", "prompts", "prompt_blocks", "n_boot"):
        if getattr(args, key) is None:
            setattr(args, key, p[key])
    if args.prompts < 2 or args.n_boot < 1 or args.batch_size < 1:
        ap.error("--prompts must be at least 2, --n-boot and --batch-size at least 1")
    return args


def recipe_args(args: argparse.Namespace, seed: int, conditioning: str) -> list[str]:
    return ["psf", "recipe", "--config", "tiny", *PRESETS[args.preset]["recipe"], *COMMON, *args.overrides,
            "--run.out_dir", str(args.runs), "--run.name", f"seed{seed}-{conditioning}", "--run.seed", str(seed),
            "--prior.model.conditioning", conditioning, "--resume", "auto"]


def train(args: argparse.Namespace) -> None:
    for seed in args.seeds:
        for conditioning in CONDITIONING:
            run = args.runs / f"seed{seed}-{conditioning}"
            source = args.runs / f"seed{seed}-none" / "base"
            if conditioning != "none" and not (run / "base").exists():
                shutil.copytree(source, run / "base")  # the same model: only the prior trains again
            if cli.main(recipe_args(args, seed, conditioning)) != 0:
                raise SystemExit(f"training {run} failed")


def evaluate_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    arts = {c: load_recipe(args.runs / f"seed{seed}-{c}") for c in CONDITIONING}
    a, b = arts["none"], arts["known_mask"]
    gen = build_generator(a.cfg.data.planted)
    T = gen.document_tokens
    try:
        check_prompt_blocks(args.prompt_blocks, gen.blocks)
    except ForethoughtError as e:
        raise SystemExit(f"--prompt-blocks: {e}") from None
    docs = planted_split(a.cfg.data.planted, "test").reshape(-1, T).astype(np.int64)
    if len(docs) < args.prompts:
        raise SystemExit(f"the planted test split holds {len(docs)} documents, {args.prompts} prompts asked")
    docs = docs[:args.prompts]
    idx = resample_indices(len(docs), args.n_boot, np.random.default_rng(seed))  # as the prompted evaluation's
    out: dict[str, Any] = {"val_ce": a.results["stages"]["base"]["val_ce"], "true_val_nll": a.results["true_val_nll"],
                           "prior_val_flow_loss": {c: arts[c].results["stages"]["prior"]["val_flow_loss"]
                                                   for c in CONDITIONING},
                           "train_wall_s": {"base": a.results["stages"]["base"]["train_wall_s"],
                                            **{f"prior_{c}": arts[c].results["stages"]["prior"]["train_wall_s"]
                                               for c in CONDITIONING}},
                           "prompted": {}, "unprompted": {}}
    t0 = time.perf_counter()

    def sampler(art: Any, replace: bool) -> Any:
        return lambda prompt, g: sample_psf(art.model, art.prior, len(prompt), generator=g, prompt=prompt,
                                            replace=replace, batch_size=args.batch_size)

    # the package's prompted evaluation (psf eval --prompted_blocks): the first method is the reference of the
    # paired differences, ``true`` the documents' own continuations
    out["prompted"] = prompted_continuations(gen, docs, {"replace": sampler(a, True), "conditioned": sampler(b, True),
                                                         "conditioned_no_replace": sampler(b, False)},
                                             args.prompt_blocks, seed, args.n_boot)
    for c in CONDITIONING:
        g = device_generator(1000 * seed + 999, torch.device("cpu"))
        x = sample_psf(arts[c].model, arts[c].prior, len(docs), generator=g, batch_size=args.batch_size).numpy()
        out["unprompted"][c] = {"nll_per_token": summary(token_nll(gen, x), idx),
                                "persistence": summary(persistence(gen, x), idx)}
    out["unprompted"]["true"] = {"nll_per_token": summary(token_nll(gen, docs), idx),
                                 "persistence": summary(persistence(gen, docs), idx)}
    out["eval_wall_s"] = time.perf_counter() - t0
    return out


def cached_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """:func:`evaluate_seed`, kept in ``<runs>/eval-seed<S>-<key>.json``: the key holds the evaluation settings and
    both runs' results.json, so a rerun after a change of either evaluates again."""
    fields = {"prompts": args.prompts, "prompt_blocks": args.prompt_blocks, "n_boot": args.n_boot,
              "batch_size": args.batch_size,
              **{c: hashlib.sha256((args.runs / f"seed{seed}-{c}" / "results.json").read_bytes()).hexdigest()
                 for c in CONDITIONING}}
    key = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]
    path = args.runs / f"eval-seed{seed}-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    res = evaluate_seed(args, seed)
    atomic_write_json(path, res)
    return res


def over_seeds(per_seed: dict[str, dict], prompt_blocks: list[int]) -> dict[str, Any]:
    """Per m, metric and method: mean ± std over seeds; each method - replace: the t interval of the seed mean."""
    res: dict[str, Any] = {}
    seeds = list(per_seed)
    for m in map(str, prompt_blocks):
        res[m] = {}
        for k in METRICS:
            vals = {name: [per_seed[s]["prompted"][m][name][k]["mean"] for s in seeds] for name in METHODS}
            if any(v is None for v in vals["replace"]):
                continue
            entry: dict[str, Any] = {name: {"mean": float(np.mean(v)), "std": float(np.std(v, ddof=1))
                                            if len(v) > 1 else None} for name, v in vals.items()}
            for name in METHODS[2:] + ("true",):
                d = seed_mean_difference(vals[name], vals["replace"])
                entry[f"{name} - replace"] = {"mean_diff": d["mean_diff"], "std_diff": d["std_diff"],
                                              "t_interval": list(d["interval"]) if d["interval"] else None}
            res[m][k] = entry
    return res


def table(res: dict[str, Any]) -> str:
    stay = res["stay_prob"]
    lines = [f"prompted continuations on the planted corpus ({res['prompts']} test prompts, seeds {res['seeds']}); "
             f"true stay probability {stay}, chance {res['chance_stay']:.3f}", "",
             "| m | method | junction stay | continuation NLL/token | continuation persistence |", "|---|---|---|---|---|"]
    for m, row in res["over_seeds"].items():
        for name in METHODS:
            cells = []
            for k in METRICS:
                e = row.get(k, {}).get(name)
                std = "" if e is None or e["std"] is None else f" ± {e['std']:.3f}"
                cells.append("—" if e is None else f"{e['mean']:.3f}{std}")
            lines.append(f"| {m} | {name} | " + " | ".join(cells) + " |")
    lines += ["", "differences vs replace (mean over seeds [t 95 %]):"]
    for m, row in res["over_seeds"].items():
        for name in METHODS[2:]:
            parts = []
            for k in METRICS:
                e = row.get(k, {}).get(f"{name} - replace")
                if e is not None:
                    iv = e["t_interval"]
                    parts.append(f"{k} {e['mean_diff']:+.3f}" + (f" [{iv[0]:+.3f}, {iv[1]:+.3f}]" if iv else ""))
            lines.append(f"- m={m} {name}: " + "; ".join(parts))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    if not args.collect_only:
        train(args)
    per_seed = {str(s): cached_seed(args, s) for s in args.seeds}
    art = load_recipe(args.runs / f"seed{args.seeds[0]}-none")
    p = art.cfg.data.planted
    res = {"command": " ".join(["benchmarks/psf_prompted.py", *(argv if argv is not None else sys.argv[1:])]),
           "environment": environment(), "wall_s": None, "preset": args.preset, "seeds": args.seeds,
           "prompts": args.prompts, "prompt_blocks": args.prompt_blocks, "n_boot": args.n_boot,
           "stay_prob": p.stay_prob, "chance_stay": 1.0 / p.topics, "planted": asdict(p),
           "recipe_overrides": recipe_args(args, args.seeds[0], "{conditioning}")[2:],
           "sampling": {"temperature": 1.0, "top_p": 1.0, "prior_steps": art.prior.config.steps},
           "per_seed": per_seed, "over_seeds": over_seeds(per_seed, args.prompt_blocks),
           "notes": {"true": "the test documents' own continuations", "interval": "95 % percentile bootstrap over "
                     "prompts (differences: paired, the same prompts); over seeds: Student-t of the seed mean",
                     "base": "seed<S>-known_mask/base is a copy of seed<S>-none/base (the same model)",
                     "wall_s": "this invocation only; each seed's training and evaluation times are its "
                               "train_wall_s and eval_wall_s (a seed evaluated by an earlier invocation is read "
                               "from its cache, <runs>/eval-seed<S>-<key>.json)"}}
    res["wall_s"] = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, res)
    print(table(res))
    print(f"\nwrote {args.out}")
    return res


if __name__ == "__main__":
    main()
