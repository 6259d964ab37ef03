"""Benchmark: Predictive State Flow on WikiText-2 against content states, an AR GPT and a 32-step token flow.

Training (each piece its own run folder under ``--runs``, default ``runs/bench-psf-wikitext/``; every piece
resumable and skipped when finished; ``--jobs`` single-threaded subprocesses at a time, ``OMP_NUM_THREADS`` =
``--threads`` each):

- ``psf/``         ``forethought psf recipe --config small`` (predictive states, ``baselines: [ar]``: the AR
  GPT trains in ``psf/ar/`` on the same windows and as many tokens as all PSF model stages together);
- ``psf_content/`` the same recipe with ``--model.states content --baselines []`` (the ablation; no second AR);
- ``token_flow/``  the ELF-style token flow (forethought.psf.token_flow, 32 Euler steps) over the trained AR
  model's (frozen) token table. It gets exactly the AR baseline's batches: the recipe's batch function (same
  seed, windows, batch size and steps), so the same training windows and tokens. Its width is PSF's width and
  its depth is chosen so that its trained parameters are within ±20 % of PSF encoder + decoder (the ratio is
  asserted and reported); optimiser settings are the AR stage's.

``psf`` and ``psf_content`` start together (``--jobs 2``); ``token_flow`` starts once ``psf`` (and so its AR
model) is finished. All run as subprocesses (``forethought.cli`` for the recipes, this script with
``--train-token-flow`` for the flow), so two trainings share the two cores one thread each.

Evaluation (in this process, ``--eval-threads`` torch threads):

- references: the first ``--references`` non-overlapping windows of L tokens of the WikiText-2 **test** split
  (never used in training; the recipe's validation windows come from the valid split), tokenised exactly as
  training data, decoded and detokenised like samples (forethought.eval.text);
- every model (``psf``, ``psf_content``, ``ar``, ``token_flow``, and ``psf_mean_trajectory`` = the PSF model
  decoding the prior's stored mean state trajectory) samples ``--samples`` documents at each of the ``--sweep``
  (temperature, top-p) points (at most 4; the token flow has no nucleus, it samples its final logits at the
  temperature and ignores top-p), the same seeds for every model;
- one judge-token cap for references and all sample sets (``--length-quantile`` of their judge lengths, see
  forethought.eval.judge.matched_length) so MAUVE compares equal lengths; then one judge pass per set giving
  gen-PPL, unigram entropy and MAUVE features;
- target entropy = mean per-sample unigram entropy of the references; ``gen_ppl_at_matched_entropy`` is read off
  each model's sweep by forethought.eval.curves.ppl_at_entropy (null when the sweep does not bracket it);
  ``entropy``, ``gen_ppl`` and ``mauve`` are those of the sweep point nearest the target;
- cost: ``flops_per_sample`` (FlopCounterMode around sampling one document, temperature 1), its analytic
  2·params·tokens (+ attention) counterpart ``flops_per_sample_analytic``, ``samples_per_s_b1``/``_b32`` (wall
  clock after a warm-up call), ``serial_depth`` (sequential network calls while sampling, counted with forward
  hooks: prior steps + decoder steps for PSF, L for AR, Euler steps for the token flow).

Writes ``--out`` (default ``benchmarks/results/psf_wikitext.json``) and ``<out stem>_curves.png`` beside it and
prints a markdown table. ``--collect-only`` evaluates finished runs without training. Every sample set and
judge pass is cached in ``<runs>/eval-cache/`` (keyed by the run's results.json, seed, sweep point, sample count
and judge; a judge pass keeps every position's NLL and final state, so the common length cap is applied
afterwards), so an interrupted evaluation resumes, and ``--prepare MODEL ...`` samples and judges finished models
while others still train; ``wall_s`` is the final invocation's, ``evaluation_walls`` lists every evaluating
invocation. ``--preset tiny`` runs the whole pipeline at toy size (generated corpus, L=32, K=4; the smoke
test), and then the default run folder and output are ``runs/bench-psf-wikitext-tiny/`` and
``benchmarks/results/psf_wikitext_tiny.json``.

    FORETHOUGHT_DATA=../shared/data python benchmarks/psf_wikitext.py [--jobs 2] [--samples 128]
        [--sweep 1.2:1.0 1.0:1.0 0.8:0.9 0.7:0.9] [--judge smollm2-135m]
        [--collect-only | --train-only | --prepare MODEL ...] [-- overrides]

(FORETHOUGHT_DATA defaults to ../shared/data when that folder holds wikitext-2/.)

The AR baseline's depth: ``--ar-layers auto`` (default) passes the recipe the depth whose parameter count is
closest to PSF encoder + decoder (the issue asks for ±20 %), and the token flow's depth is chosen the same way;
the parameter counts and ratios of a run are in its JSON (``params``, ``params_encoder_decoder``,
``params_ratio_to_psf_encoder_decoder``; the frozen token table of the flow is a buffer and not counted).

Costs: the small run has been run end to end; its measured training walls (``train_wall_s`` per model),
evaluation walls (``evaluation_walls``, ``eval_timings_s``) and machine are in
``benchmarks/results/psf_wikitext.json`` — numbers are kept there rather than here, where they would go stale.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

PRESETS = {
    "small": {"config": "small", "runs": ROOT / "runs" / "bench-psf-wikitext",
              "out": ROOT / "benchmarks" / "results" / "psf_wikitext.json", "samples": 128, "references": 128,
              "judge": "smollm2-135m"},
    "tiny": {"config": "tiny", "runs": ROOT / "runs" / "bench-psf-wikitext-tiny",
             "out": ROOT / "benchmarks" / "results" / "psf_wikitext_tiny.json", "samples": 8, "references": 8,
             "judge": "smollm2-135m"},
}
# Chosen before any result: one point above the models' own distribution (T 1.2), T 1, and one truncated point,
# so that a sweep brackets a reference entropy that lies either above or below the model's T = 1 entropy.
# The fourth point (T 0.7, top-p 0.9) was added after the first evaluation: the PSF models' sweeps ended 0.01-0.08
# nats above the references' entropy at T 0.8, so they bracketed nothing (the issue allows up to 4 points).
DEFAULT_SWEEP = ["1.2:1.0", "1.0:1.0", "0.8:0.9", "0.7:0.9"]
ROWS = ("psf", "psf_content", "ar", "token_flow", "psf_mean_trajectory")
PARAM_TOLERANCE = 0.2  # token flow params within ±20 % of PSF encoder + decoder
TOKEN_FLOW_STEPS = 32


# ---- arguments -------------------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small", help="recipe preset (tiny: smoke test)")
    ap.add_argument("--runs", type=Path, help="run folder root (default per preset)")
    ap.add_argument("--out", type=Path, help="results JSON (default per preset); the PNG goes beside it")
    ap.add_argument("--jobs", type=int, default=2, help="trainings at a time (subprocesses)")
    ap.add_argument("--threads", type=int, default=1, help="OMP/torch threads per training subprocess")
    ap.add_argument("--eval-threads", type=int, default=0, help="torch threads for evaluation (0 = jobs×threads)")
    ap.add_argument("--samples", type=int, help="samples per model and sweep point (default 128; tiny 8)")
    ap.add_argument("--references", type=int, help="held-out reference windows (default 128; tiny 8)")
    ap.add_argument("--sweep", nargs="+", default=DEFAULT_SWEEP, metavar="T:P",
                    help="(temperature:top_p) sweep points, at most 4")
    ap.add_argument("--judge", help="judge causal LM: alias, HF id or folder (default smollm2-135m)")
    ap.add_argument("--judge-batch", type=int, default=16)
    ap.add_argument("--length-quantile", type=float, default=0.05,
                    help="judge-token cap for every text = this quantile of all judge lengths (matched lengths)")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed")
    ap.add_argument("--device", default="cpu", help="evaluation device")
    ap.add_argument("--collect-only", action="store_true", help="evaluate finished runs only (no training)")
    ap.add_argument("--train-only", action="store_true", help="train (or skip finished runs), do not evaluate")
    ap.add_argument("--prepare", nargs="+", choices=ROWS, metavar="MODEL",
                    help="sample and judge only these finished models (and the references) into the evaluation "
                         "cache, write no results: lets evaluation start while other models still train")
    ap.add_argument("--ar-layers", default="auto",
                    help="AR baseline depth: auto (the depth whose parameters are closest to PSF encoder + "
                         "decoder), preset (the config's ar.model.n_layer), or a number")
    ap.add_argument("--train-token-flow", action="store_true", help=argparse.SUPPRESS)  # internal: one job
    ap.add_argument("overrides", nargs="*", help="extra overrides for both recipes (after --)")
    args = ap.parse_args(argv)
    p = PRESETS[args.preset]
    args.runs = args.runs or p["runs"]
    args.out = args.out or p["out"]
    args.samples = args.samples or p["samples"]
    args.references = args.references or p["references"]
    args.judge = args.judge or p["judge"]
    args.sweep_points = [tuple(float(x) for x in s.split(":")) for s in args.sweep]
    if not 1 <= len(args.sweep_points) <= 4 or any(len(s) != 2 for s in args.sweep_points):
        ap.error("--sweep takes 1 to 4 points written temperature:top_p")
    if not args.eval_threads:
        args.eval_threads = max(1, args.jobs * args.threads)
    return args


def _default_data_root() -> None:
    """WikiText-2 comes from FORETHOUGHT_DATA; default to the workspace's ../shared/data when it has it."""
    shared = ROOT.parent / "shared" / "data"
    if not os.environ.get("FORETHOUGHT_DATA") and (shared / "wikitext-2").is_dir():
        os.environ["FORETHOUGHT_DATA"] = str(shared)


# ---- training ----------------------------------------------------------------------------------------------------

def recipe_command(args: argparse.Namespace, name: str) -> list[str]:
    cmd = [sys.executable, "-m", "forethought.cli", "psf", "recipe", "--config", PRESETS[args.preset]["config"],
           "--run.out_dir", str(args.runs), "--run.name", name, "--run.device", "cpu",
           "--longer_blocks.blocks", "[]", "--resume", "auto"]
    if name == "psf":
        cmd += ["--baselines", "[ar]"]
        layers = ar_layers(args)
        if layers is not None:
            cmd += ["--ar.model.n_layer", str(layers)]
    else:
        cmd += ["--model.states", "content", "--baselines", "[]"]
    return cmd + list(args.overrides)


def _recipe_config(args: argparse.Namespace) -> Any:
    from forethought.cli import resolve_config_path
    from forethought.core.config import load_config
    from forethought.psf.recipe import RecipeConfig

    return load_config(RecipeConfig, resolve_config_path("psf", "recipe", PRESETS[args.preset]["config"]),
                       list(args.overrides))


def ar_layers(args: argparse.Namespace) -> int | None:
    """The AR baseline's depth (None = the preset's): ``auto`` picks the depth whose parameter count is closest
    to PSF encoder + decoder at the preset's width (the issue asks for ±20 %), with the vocabulary of a
    ``bpe:N`` tokenizer taken as N (the exact ratio is reported after training)."""
    if args.ar_layers == "preset":
        return None
    if args.ar_layers != "auto":
        return int(args.ar_layers)
    from forethought.psf.ar import build_ar
    from forethought.psf.generate import build_psf

    cfg = _recipe_config(args)
    spec = cfg.data.tokenizer
    if spec.startswith("bpe:"):
        vocab = int(spec.split(":", 1)[1])
    else:
        from forethought.data.tokenizers import load_tokenizer

        vocab = len(load_tokenizer(spec))
    counts = build_psf(cfg.model, vocab, 0).num_params()
    target = counts["encoder"] + counts["decoder"]

    def ratio(layers: int) -> float:
        c = copy.deepcopy(cfg.ar.model)
        c.n_layer = layers
        return build_ar(c, vocab, cfg.model.seq_len).num_params() / target

    return min(range(1, 49), key=lambda n: abs(ratio(n) - 1))


def token_flow_command(args: argparse.Namespace) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--train-token-flow", "--preset", args.preset,
            "--runs", str(args.runs), "--out", str(args.out)]


def train_all(args: argparse.Namespace) -> None:
    """Run the pending pieces as subprocesses, ``args.jobs`` at a time; token_flow waits for psf."""
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT / "src") + os.pathsep
           + os.environ.get("PYTHONPATH", "")}
    args.runs.mkdir(parents=True, exist_ok=True)
    commands = {"psf": lambda: recipe_command(args, "psf"), "psf_content": lambda: recipe_command(args, "psf_content"),
                "token_flow": lambda: token_flow_command(args)}
    jobs = {"psf": (commands["psf"], []), "psf_content": (commands["psf_content"], []),
            "token_flow": (commands["token_flow"], ["psf"])}
    done = {name for name in jobs if (args.runs / name / "results.json").is_file()}
    for name in sorted(done):
        print(f"{name}: finished, skipped")
    pending = [n for n in jobs if n not in done]
    running: dict[str, subprocess.Popen] = {}
    logs: dict[str, Any] = {}
    while pending or running:
        for name in list(pending):
            if len(running) >= args.jobs:
                break
            if all(dep in done for dep in jobs[name][1]):
                pending.remove(name)
                cmd = jobs[name][0]()
                logs[name] = open(args.runs / f"{name}.log", "a")
                print(f"{name}: started ({' '.join(cmd)}), log {args.runs / (name + '.log')}", flush=True)
                running[name] = subprocess.Popen(cmd, env=env, stdout=logs[name], stderr=subprocess.STDOUT,
                                                 cwd=ROOT)
        if not running:
            sys.exit(f"cannot start {pending}: a dependency did not finish")
        time.sleep(0.5 if args.preset == "tiny" else 10)
        for name, proc in list(running.items()):
            if proc.poll() is not None:
                del running[name]
                logs.pop(name).close()
                if proc.returncode != 0:
                    for other in running.values():
                        other.terminate()
                    tail = (args.runs / f"{name}.log").read_text()[-3000:]
                    sys.exit(f"{name} failed (exit {proc.returncode}); log tail:\n{tail}")
                done.add(name)
                print(f"{name}: finished", flush=True)


def token_flow_config(psf_model: Any, seq_len: int, table_dim: int, vocab: int) -> tuple[Any, dict]:
    """Token-flow config at PSF's width, with the depth that brings its trained parameters closest to PSF
    encoder + decoder (other widths, nearest first, only if no depth lands within the tolerance)."""
    import torch

    from forethought.psf.token_flow import TokenFlow, TokenFlowConfig

    counts = psf_model.num_params()
    target = counts["encoder"] + counts["decoder"]
    d, heads = psf_model.config.n_embd, psf_model.config.n_head
    widths = sorted({max(heads, round(d * f / heads) * heads) for f in (1.0, 0.75, 1.25, 0.5, 1.5, 2.0)},
                    key=lambda w: abs(w - d))
    table = torch.zeros(vocab, table_dim)
    best = None
    for width in widths:
        for layers in range(1, 33):
            cfg = TokenFlowConfig(seq_len=seq_len, n_embd=width, n_layer=layers, n_head=heads,
                                  steps=TOKEN_FLOW_STEPS)
            n = TokenFlow(cfg, table).num_params()
            if best is None or abs(n / target - 1) < abs(best[1] / target - 1):
                best = (cfg, n)
            if n > target * (1 + PARAM_TOLERANCE):
                break
        if abs(best[1] / target - 1) <= PARAM_TOLERANCE:
            break
    cfg, n = best
    ratio = n / target
    if abs(ratio - 1) > PARAM_TOLERANCE:
        raise SystemExit(f"no token-flow size within ±{PARAM_TOLERANCE:.0%} of PSF encoder+decoder ({target}); "
                         f"closest {n} ({ratio:.3f})")
    return cfg, {"params": n, "psf_encoder_decoder": target, "ratio": ratio}


def train_token_flow_job(args: argparse.Namespace) -> None:
    """Subprocess body: the token flow over the finished AR model's table, on the AR baseline's batches."""
    import torch

    from forethought.core.config import load_config
    from forethought.core.run import Run
    from forethought.core.runtime import compute_init, step_generator
    from forethought.core.trainer import train
    from forethought.data.corpora import random_windows
    from forethought.psf.generate import load_data, load_recipe
    from forethought.psf.recipe import RecipeConfig
    from forethought.psf.token_flow import TokenFlow, embedding_table, token_flow_loss

    art = load_recipe(args.runs / "psf")
    if art.ar is None:
        sys.exit("the psf run has no AR baseline")
    ar_res = art.results["stages"]["ar"]
    L = art.cfg.model.seq_len
    table = embedding_table(art.ar)
    cfg, sizes = token_flow_config(art.model, L, table.shape[1], table.shape[0])
    tcfg = copy.deepcopy(load_config(RecipeConfig, args.runs / "psf" / "config.yaml").ar.train)
    tcfg.steps = ar_res["steps"]  # the AR baseline's steps and batch size: the same windows and tokens
    seed = art.cfg.seed
    train_tokens = load_data(art.cfg.data, L)[0]
    rt = compute_init("cpu", seed)
    torch.manual_seed(seed)
    model = TokenFlow(cfg, table)
    run = Run.create(args.runs, "token_flow")

    def batch_fn(step: int) -> dict:  # exactly the recipe's batch function (forethought.psf.recipe.run)
        return {"tokens": random_windows(train_tokens, tcfg.batch_size, L, step_generator(seed, step)), "step": step}

    out = train(model, lambda m, b: token_flow_loss(m, b["tokens"]), batch_fn, tcfg, run, rt, resume="auto",
                desc="token-flow", model_config=model.config_dict())
    res = {**sizes, "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}, "steps": tcfg.steps,
           "batch_size": tcfg.batch_size, "training_tokens": tcfg.steps * tcfg.batch_size * L,
           "ar_training_tokens": ar_res["training_tokens"], "train_wall_s": out["wall_s"],
           "final_loss": out.get("final_loss"), "curve": out["curve"], "table": "psf/ar token table (frozen)"}
    run.write_results(res)
    print(json.dumps({k: res[k] for k in ("params", "psf_encoder_decoder", "ratio", "steps", "training_tokens")}))


# ---- evaluation --------------------------------------------------------------------------------------------------

def _analytic_cached_decode(n_params: int, n_layer: int, d: int, prefix: int, steps: int) -> int:
    """One KV-cached decode: a prefix call over ``prefix`` positions (dense grid), then ``steps`` one-position
    calls attending prefix + j keys (j = 1..steps)."""
    from forethought.eval.cost import analytic_flops

    total = analytic_flops(n_params, prefix, n_layer, d, prefix) if prefix else 0
    return total + sum(analytic_flops(n_params, 1, n_layer, d, prefix + j) for j in range(1, steps + 1))


def analytic_psf(model: Any, prior: Any, steps: int, mean: bool) -> int:
    from forethought.eval.cost import analytic_flops, matmul_params

    K, n, d = model.blocks, model.block_len, model.config.n_embd
    dec = model.decoder
    flops = K * _analytic_cached_decode(matmul_params(dec), dec.config.n_layer, d, K + 1, n - 1)
    flops += 2 * model.state_in.weight.numel() * K  # states -> memory slots
    if model.use_codes:
        flops += 2 * model.code_in.weight.numel() * K
    if model.landing:
        flops += 2 * model.land_proj.weight.numel() * (K - 1)
    if not mean:
        pc = prior.config
        per_step = analytic_flops(matmul_params(prior.net), K, pc.n_layer, pc.n_embd)
        per_step += 2 * matmul_params(prior.time_mlp)  # the time MLP runs once per document and step
        flops += steps * per_step
    return int(flops)


def analytic_ar(ar: Any, L: int) -> int:
    from forethought.eval.cost import matmul_params

    return _analytic_cached_decode(matmul_params(ar), ar.config.n_layer, ar.config.n_embd, 0, L)


def analytic_token_flow(tf: Any) -> int:
    from forethought.eval.cost import analytic_flops, matmul_params

    c = tf.config
    per_step = analytic_flops(matmul_params(tf.net), c.seq_len, c.n_layer, c.n_embd)
    if c.head == "logits":
        per_step += 2 * c.seq_len * tf.vocab_size * tf.dim  # x̂ = softmax(logits) · E
    return int(c.steps * per_step)


@dataclass
class Sampler:
    """One row of the table: ``fn(n, temperature, top_p, generator)`` -> (n, L) ids, and its cost facts."""

    name: str
    fn: Callable[[int, float, float, Any], Any]
    depth_modules: list[Any]  # modules whose forward calls are the sequential steps of sampling
    analytic: int  # analytic FLOPs per document
    params: int
    extra: dict


def build_samplers(args: argparse.Namespace, names: tuple[str, ...] = ROWS) -> tuple[dict[str, Sampler], Any, dict]:
    """Samplers for ``names`` only (a model that is not needed need not have finished training)."""
    import torch

    from forethought.core.checkpoint import latest_checkpoint, load_checkpoint
    from forethought.psf import load_recipe, sample_ar, sample_psf
    from forethought.psf.token_flow import TokenFlow, TokenFlowConfig, sample_token_flow

    dev = args.device
    psf = load_recipe(args.runs / "psf", device=dev)
    L = psf.cfg.model.seq_len
    batch = 32

    def psf_fn(art: Any, trajectory: str) -> Callable:
        def fn(n: int, temperature: float, top_p: float, g: Any) -> Any:
            return sample_psf(art.model, art.prior, n, temperature=temperature, top_p=top_p,
                              steps=art.prior.config.steps, generator=g, trajectory=trajectory, batch_size=batch)
        return fn

    def ar_fn(n: int, temperature: float, top_p: float, g: Any) -> Any:
        return torch.cat([sample_ar(psf.ar, min(batch, n - i), L, psf.bos_id, temperature=temperature, top_p=top_p,
                                    generator=g) for i in range(0, n, batch)])

    def psf_params(art: Any) -> tuple[int, dict]:
        c = art.model.num_params()
        prior = sum(p.numel() for p in art.prior.parameters())
        return c["total"] + prior, {"params_encoder_decoder": c["encoder"] + c["decoder"],
                                    "params_breakdown": {**c, "prior": prior}}

    enc_dec = psf.model.num_params()
    enc_dec = enc_dec["encoder"] + enc_dec["decoder"]
    samplers, train_info = {}, {}
    arts = {"psf": (psf, "prior"), "psf_mean_trajectory": (psf, "mean")}
    if "psf_content" in names:
        arts["psf_content"] = (load_recipe(args.runs / "psf_content", device=dev), "prior")
    for name, (art, traj) in arts.items():
        if name not in names:
            continue
        if art.prior is None:
            sys.exit(f"{name}: the PSF run has no trained prior for its final stage")
        total, extra = psf_params(art)
        steps = art.prior.config.steps
        extra.update(prior_steps=0 if traj == "mean" else steps, blocks=art.model.blocks,
                     block_len=art.model.block_len, states=art.model.config.states, trajectory=traj,
                     final_stage=art.stage)
        samplers[name] = Sampler(name, psf_fn(art, traj),
                                 ([art.prior] if traj == "prior" else []) + [art.model.decoder],
                                 analytic_psf(art.model, art.prior, steps, traj == "mean"), total, extra)
        train_info[name] = _psf_train(art.results)
    if "psf_mean_trajectory" in train_info:
        train_info["psf_mean_trajectory"]["note"] = "the psf model and prior (no training)"
    if "ar" in names:
        samplers["ar"] = Sampler("ar", ar_fn, [psf.ar], analytic_ar(psf.ar, L), psf.ar.num_params(),
                                 {"kv_cache": True,
                                  "params_ratio_to_psf_encoder_decoder": psf.ar.num_params() / enc_dec})
        train_info["ar"] = {"train_tokens": psf.results["stages"]["ar"]["training_tokens"],
                            "train_wall_s": psf.results["stages"]["ar"]["train_wall_s"]}
    if "token_flow" in names:
        tf_res = json.loads((args.runs / "token_flow" / "results.json").read_text())
        tf = TokenFlow(TokenFlowConfig(**tf_res["config"]), torch.zeros(psf.results["vocab_size"],
                                                                         psf.ar.config.n_embd))
        load_checkpoint(latest_checkpoint(args.runs / "token_flow"), tf)
        tf = tf.to(dev).eval()

        def tf_fn(n: int, temperature: float, top_p: float, g: Any) -> Any:
            del top_p  # the token flow samples its final logits at the temperature; it has no nucleus
            return sample_token_flow(tf, n, TOKEN_FLOW_STEPS, g, temperature=temperature, batch_size=batch)

        samplers["token_flow"] = Sampler("token_flow", tf_fn, [tf], analytic_token_flow(tf), tf.num_params(),
                                         {"steps": TOKEN_FLOW_STEPS, "params_ratio_to_psf_encoder_decoder":
                                          tf.num_params() / enc_dec, "config": tf_res["config"],
                                          "top_p": "ignored (no nucleus)", "frozen_table_params": tf.table.numel()})
        train_info["token_flow"] = {"train_tokens": tf_res["training_tokens"], "train_wall_s": tf_res["train_wall_s"]}
    return samplers, psf, train_info


def _run_fingerprint(args: argparse.Namespace, name: str) -> str:
    """The trained run a sample set comes from: its results.json (rewritten whenever a stage trains; a rerun
    that only skips finished stages leaves it as it was)."""
    folder = {"psf_content": "psf_content", "token_flow": "token_flow"}.get(name, "psf")
    return hashlib.sha256((args.runs / folder / "results.json").read_bytes()).hexdigest()[:16]


def _key(**fields: Any) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:12]


def cached_texts(path: Path, make: Callable[[], list[str]]) -> tuple[list[str], float, bool]:
    """Decoded texts from ``path`` when present, else ``make()`` written there atomically; (texts, s, cached)."""
    if path.is_file():
        d = json.loads(path.read_text())
        return d["texts"], d["wall_s"], True
    t0 = time.perf_counter()
    texts = make()
    wall = time.perf_counter() - t0
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"texts": texts, "wall_s": wall}))
    tmp.replace(path)
    return texts, wall, False


def cached_pass(path: Path, make: Callable[[], Any]) -> tuple[Any, bool]:
    """A judge pass (forethought.eval.judge.JudgePass) from ``path`` when present, else ``make()`` saved there."""
    from forethought.eval.judge import JudgePass

    if path.is_file():
        return JudgePass.load(path), True
    jp = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    jp.save(path)
    return jp, False


def _psf_train(results: dict) -> dict:
    stages = {k: v for k, v in results["stages"].items() if k != "ar"}
    return {"train_tokens": results["model_training_tokens"],
            "train_wall_s": sum(v["train_wall_s"] for v in stages.values()),
            "prior_train_steps": sum(v["steps"] for k, v in stages.items() if k.startswith("prior")),
            "stages": list(stages)}


def evaluate(args: argparse.Namespace) -> dict:
    import torch

    from forethought.data.corpora import load_corpus_text, resolve_corpus
    from forethought.eval.cost import count_forward_calls, flops_per_document, samples_per_second
    from forethought.eval.curves import plot_entropy_curves, ppl_at_entropy
    from forethought.eval.judge import load_judge, matched_length, score_texts
    from forethought.eval.mauve import mauve_score
    from forethought.eval.text import decode_samples, reference_windows

    torch.set_num_threads(args.eval_threads)
    names = tuple(args.prepare) if args.prepare else ROWS
    timings: dict[str, float] = {}
    cache_hits: list[str] = []
    t = time.perf_counter()
    samplers, psf, train_info = build_samplers(args, names)
    corpus, L = psf.cfg.data.corpus, psf.cfg.model.seq_len
    wikitext = corpus.startswith("wikitext")
    ref_split = "test"
    ref_ids = reference_windows(load_corpus_text(corpus, ref_split), psf.tokenizer, L, n=args.references,
                                documents=resolve_corpus(corpus).documents)
    ref_texts = decode_samples(ref_ids, psf.tokenizer, wikitext=wikitext)

    # Every sample set and judge pass is cached under <runs>/eval-cache/, keyed by everything it depends on, so
    # an interrupted evaluation resumes and --prepare can score finished models while others train.
    cache = args.runs / "eval-cache"
    texts: dict[str, list[list[str]]] = {}
    text_keys: dict[str, list[str]] = {}
    for name, s in samplers.items():
        texts[name], text_keys[name] = [], []
        fp = _run_fingerprint(args, name)
        for i, (temp, top_p) in enumerate(args.sweep_points):
            k = _key(name=name, run=fp, seed=args.seed + i, n=args.samples, temperature=temp, top_p=top_p)

            def make(s: Sampler = s, i: int = i, temp: float = temp, top_p: float = top_p) -> list[str]:
                g = torch.Generator().manual_seed(args.seed + i)
                return decode_samples(s.fn(args.samples, temp, top_p, g), psf.tokenizer, wikitext=wikitext)

            set_texts, wall, hit = cached_texts(cache / f"{name}-p{i}-{k}.json", make)
            texts[name].append(set_texts)
            text_keys[name].append(k)
            timings[f"sample_{name}"] = timings.get(f"sample_{name}", 0.0) + wall
            if hit:
                cache_hits.append(f"{name}-p{i} samples")
    timings["load_and_sample"] = time.perf_counter() - t

    t0 = time.perf_counter()
    judge, jtok = load_judge(args.judge)
    judge = judge.to(args.device)
    limit = getattr(judge.config, "max_position_embeddings", None) or getattr(judge.config, "n_positions", None)
    full = limit - 1 if limit else None  # each pass reads whole texts (up to the judge's window); cut below

    def judged(tag: str, set_texts: list[str], k: str) -> Any:
        jk = _key(texts=k, judge=args.judge, max_tokens=full)
        jp, hit = cached_pass(cache / f"{tag}-judge-{jk}.safetensors",
                              lambda: score_texts(set_texts, judge, jtok, max_tokens=full,
                                                  batch_size=args.judge_batch))
        if hit:
            cache_hits.append(f"{tag} judge")
        return jp

    ref_pass = judged("references", ref_texts, _key(refs=ref_texts))
    passes = {name: [judged(f"{name}-p{i}", x, text_keys[name][i]) for i, x in enumerate(texts[name])]
              for name in samplers}
    timings["judge_passes"] = time.perf_counter() - t0
    if args.prepare:
        return {"prepared": list(names), "timings": timings, "cache_hits": cache_hits}
    t0 = time.perf_counter()
    cap = matched_length(jtok, ref_texts, *[x for sets in texts.values() for x in sets],
                         quantile=args.length_quantile)
    if full:
        cap = min(cap, full)
    refs = ref_pass.result(cap)
    target = refs.entropy
    rows: dict[str, dict] = {}
    curves: dict[str, list[tuple[float, float]]] = {}
    for name, s in samplers.items():
        sweep = []
        for (temp, top_p), set_texts, jp in zip(args.sweep_points, texts[name], passes[name]):
            j = jp.result(cap)
            sweep.append({"temperature": temp, "top_p": top_p, "entropy": j.entropy, "gen_ppl": j.gen_ppl,
                          "judge_tokens": j.n_tokens, "_features": j.features, "example": set_texts[0][:300]})
        curves[name] = [(p["entropy"], p["gen_ppl"]) for p in sweep]
        near = min(sweep, key=lambda p: abs(p["entropy"] - target))
        near["mauve"] = mauve_score(refs.features, near["_features"], seed=args.seed)
        for p in sweep:
            p.pop("_features")
        rows[name] = {"gen_ppl_at_matched_entropy": ppl_at_entropy(curves[name], target),
                      "entropy": near["entropy"], "gen_ppl": near["gen_ppl"], "mauve": near["mauve"],
                      "reported_point": {"temperature": near["temperature"], "top_p": near["top_p"]},
                      "sweep": sweep}
    timings["cut_and_mauve"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    for name, s in samplers.items():
        row = rows[name]
        g = torch.Generator().manual_seed(args.seed)
        row["flops_per_sample"] = flops_per_document(lambda n: s.fn(n, 1.0, 1.0, g), 1)
        row["flops_per_sample_analytic"] = s.analytic
        with torch.no_grad(), contextlib.ExitStack() as stack:
            counts = [stack.enter_context(count_forward_calls(m)) for m in s.depth_modules]
            s.fn(1, 1.0, 1.0, g)
        depth = sum(c[0] for c in counts)  # sequential network calls for one document
        sps = samples_per_second(lambda b: s.fn(b, 1.0, 1.0, g), [1, 32])
        row.update(samples_per_s_b1=sps[1], samples_per_s_b32=sps[32], serial_depth=depth, params=s.params,
                   **train_info[name], **s.extra)
        timings[f"cost_{name}"] = time.perf_counter() - t0
        t0 = time.perf_counter()
    timings["cost"] = sum(v for k, v in timings.items() if k.startswith("cost_"))

    png = args.out.with_name(args.out.stem + "_curves.png")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    plot_entropy_curves(curves, png, target_entropy=target, judge=Path(args.judge).name,
                        title=f"gen-PPL vs unigram entropy, {corpus} L={L}")
    ps = rows["psf"]
    checks = {
        "psf_flops_le_tenth_of_token_flow": {
            "pass": ps["flops_per_sample"] <= rows["token_flow"]["flops_per_sample"] / 10,
            "psf": ps["flops_per_sample"], "token_flow": rows["token_flow"]["flops_per_sample"],
            "ratio": ps["flops_per_sample"] / rows["token_flow"]["flops_per_sample"]},
        "psf_beats_content_at_matched_entropy": _beats(ps, rows["psf_content"]),
        "psf_serial_depth_eq_prior_steps_plus_L_over_K": {
            "pass": ps["serial_depth"] == ps["prior_steps"] + L // ps["blocks"], "psf": ps["serial_depth"],
            "expected": ps["prior_steps"] + L // ps["blocks"], "prior_steps": ps["prior_steps"],
            "L_over_K": L // ps["blocks"]},
        "baseline_params_within_20pct_of_psf_encoder_decoder": {
            "pass": all(abs(rows[r]["params_ratio_to_psf_encoder_decoder"] - 1) <= PARAM_TOLERANCE
                        for r in ("ar", "token_flow")),
            "psf_encoder_decoder": ps["params_encoder_decoder"], "ar": rows["ar"]["params"],
            "token_flow": rows["token_flow"]["params"],
            "psf_content_encoder_decoder": rows["psf_content"]["params_encoder_decoder"]},
        "psf_samples_per_s_b32_above_ar": {
            "pass": ps["samples_per_s_b32"] > rows["ar"]["samples_per_s_b32"], "psf": ps["samples_per_s_b32"],
            "ar": rows["ar"]["samples_per_s_b32"]},
    }
    settings = {
        "preset": args.preset, "corpus": corpus, "tokenizer": psf.cfg.data.tokenizer, "seq_len": L,
        "blocks": psf.cfg.model.blocks, "samples_per_point": args.samples,
        "sweep": [{"temperature": a, "top_p": b} for a, b in args.sweep_points], "judge": args.judge,
        "judge_max_tokens": cap, "length_quantile": args.length_quantile, "references": len(ref_texts),
        "reference_split": ref_split, "reference_judge_tokens": refs.n_tokens,
        "reference_gen_ppl": refs.gen_ppl, "target_entropy": target, "seed": args.seed, "runs": str(args.runs),
        "recipe_overrides": list(args.overrides), "token_flow_steps": TOKEN_FLOW_STEPS,
        "jobs": args.jobs, "threads_per_job": args.threads, "eval_threads": args.eval_threads,
        "conventions": {
            "entropy": "mean per-sample unigram entropy (nats) of judge tokens, after the judge_max_tokens cap",
            "gen_ppl_at_matched_entropy": "log-linear interpolation on the sweep at target_entropy; null when "
                                          "not bracketed",
            "entropy/gen_ppl/mauve": "of the sweep point nearest the target entropy",
            "flops_per_sample": "FlopCounterMode around sampling one document (temperature 1, top-p 1)",
            "flops_per_sample_analytic": "2·matmul params·positions + attention 4·layers·d·positions·context per "
                                         "network call, summed over the calls of one document (KV-cached "
                                         "decoders: one position per step; token flow adds softmax·E)",
            "serial_depth": "sequential forward calls counted with hooks while sampling one document",
            "samples_per_s": "wall clock, one untimed warm-up per batch size",
            "train_wall_s": "trainer wall time (trainings ran jobs at a time on the machine's cores)",
            "train_tokens": "psf rows: all PSF model stages (the AR budget); the prior's steps are separate",
        },
    }
    return {"rows": rows, "checks": checks, "settings": settings, "timings": timings, "png": png,
            "cache_hits": cache_hits}


def _beats(a: dict, b: dict) -> dict:
    x, y = a["gen_ppl_at_matched_entropy"], b["gen_ppl_at_matched_entropy"]
    out = {"pass": None if x is None or y is None else x < y, "psf": x, "psf_content": y}
    if out["pass"] is None:
        out["note"] = "a sweep does not bracket the target entropy, so there is no matched-entropy comparison"
    return out


# ---- report ------------------------------------------------------------------------------------------------------

def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.3e}"
    return str(x)


def markdown(res: dict) -> str:
    cols = ("gen_ppl_at_matched_entropy", "entropy", "mauve", "flops_per_sample", "flops_per_sample_analytic",
            "samples_per_s_b1", "samples_per_s_b32", "serial_depth", "params", "train_tokens", "train_wall_s")
    lines = [f"target entropy {res['settings']['target_entropy']:.3f} nats (judge {res['settings']['judge']})", "",
             "| model | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name in ROWS:
        lines.append(f"| {name} | " + " | ".join(_fmt(res[name].get(c)) for c in cols) + " |")
    lines.append("")
    for k, v in res["checks"].items():
        lines.append(f"- {k}: {v['pass']} ({', '.join(f'{a}={_fmt(b)}' for a, b in v.items() if a != 'pass')})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.preset != "tiny":
        _default_data_root()
    if args.train_token_flow:
        train_token_flow_job(args)
        return
    t0 = time.time()
    if not args.collect_only and not args.prepare:
        train_all(args)
    if args.train_only:
        return
    ev = evaluate(args)
    command = " ".join(["python", *(sys.argv if argv is None else ["benchmarks/psf_wikitext.py", *argv])])
    log = args.runs / "invocations.txt"
    seen = log.read_text().splitlines() if log.is_file() else []
    if command not in seen:
        seen.append(command)
        log.write_text("\n".join(seen) + "\n")
    walls = args.runs / "eval-cache" / "walls.jsonl"  # wall time of every evaluating invocation
    with walls.open("a") as f:
        f.write(json.dumps({"command": command, "wall_s": time.time() - t0, "prepared": args.prepare,
                            "finished": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
    if args.prepare:
        print(f"prepared {', '.join(ev['prepared'])} in {time.time() - t0:.0f} s; cached: {ev['cache_hits']}")
        return
    import torch

    res = {"command": command, "invocations": seen, "wall_s": time.time() - t0,
           "evaluation_walls": [json.loads(x) for x in walls.read_text().splitlines()],
           "machine": {"platform": platform.platform(), "processor": platform.processor(),
                       "cpu_count": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version(),
                       "device": args.device},
           "settings": ev["settings"], **{name: ev["rows"][name] for name in ROWS}, "checks": ev["checks"],
           "eval_timings_s": ev["timings"], "eval_cache_hits": ev["cache_hits"], "curves_png": ev["png"].name}
    res["settings"]["FORETHOUGHT_DATA"] = os.environ.get("FORETHOUGHT_DATA", "")
    args.out.write_text(json.dumps(res, indent=2, default=_json_default) + "\n")
    print(markdown(res))
    print(f"\nwrote {args.out} and {ev['png']}")


def _json_default(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


if __name__ == "__main__":
    main()
