"""Benchmark: Predictive State Flow on WikiText-2 against content states, an AR GPT and a 32-step token flow.

Training (each piece its own run folder under ``--runs``, default ``runs/bench-psf-wikitext/``; every piece
resumable and skipped when finished; ``--jobs`` single-threaded subprocesses at a time, ``OMP_NUM_THREADS`` =
``--threads`` each):

- ``psf/``         ``forethought psf recipe --config small`` (predictive states, ``baselines: [ar]``: the AR
  GPT trains in ``psf/ar/`` on the same windows and as many tokens as all PSF model stages together);
- ``psf_content/`` the same recipe with ``--model.states content --baselines []`` (the ablation; no second AR);
- ``token_flow/``  ``forethought psf token-flow --recipe_run psf/`` (forethought.psf.token_flow_run): the
  ELF-style token flow (32 Euler steps) over the trained AR model's (frozen) token table, on exactly the AR
  baseline's batches (the recipe's batch function, its seed, batch size and steps), at PSF's width and the depth
  whose trained parameters are within ±20 % of PSF encoder + decoder; optimiser settings are the AR stage's.

``psf`` and ``psf_content`` start together (``--jobs 2``); ``token_flow`` starts once both (and so psf's AR
model) are finished. All run as ``forethought.cli`` subprocesses, so two trainings share the two cores one thread each.

Evaluation (in this process, ``--eval-threads`` torch threads) is ``forethought psf eval``
(forethought.psf.evaluate, where every convention is stated) on ``psf/`` with ``--compare [psf_content,
token_flow]`` and every ``--compare-runs`` folder, plus ``psf_state_only`` when the psf run trained a state-only
prior (those rows under ``other_rows``), its own results in ``<runs>/eval/results.json``:

- references: ``--references`` non-overlapping windows of L tokens of the WikiText-2 **test** split (never used
  in training), evenly spaced over the whole split (``--reference-spread``), tokenised as training data, decoded
  and detokenised like samples;
- every model (``psf``, ``psf_content``, ``ar``, ``token_flow``, and ``psf_mean_trajectory`` = the PSF model
  decoding the prior's stored mean state trajectory) samples ``--samples`` documents at each sweep point: the
  ``--sweep`` (temperature, top-p) points for the decoders, the ``--token-flow-sweep`` step temperatures for the
  token flow (its softmax temperature at every Euler step, the entropy knob; rounding samples the final logits
  at temperature 1); point i uses seed ``--seed`` + i for every model;
- one judge-token cap for references and all sample sets (``--length-quantile``), one judge pass per set: gen-PPL,
  unigram entropy, n-gram repetition (rep-2/3/4), MAUVE at every point; 95 % bootstrap intervals over samples
  (``--n-boot``; MAUVE ``--mauve-boot``) and unpaired bootstrap intervals of the differences psf - each other
  model (``differences``);
- target entropy = the references' mean unigram entropy; ``gen_ppl_at_matched_entropy`` is read off each model's
  sweep only where it brackets the target (null otherwise), with its interval; ``entropy``, ``gen_ppl`` and
  ``mauve`` of a row are those of the sweep point nearest the target;
- cost: ``flops_per_sample`` (FlopCounterMode around sampling one document, temperature 1), its analytic
  counterpart ``flops_per_sample_analytic``, ``samples_per_s_b1``/``_b32``, ``serial_depth`` (prior steps + L/K
  for PSF, L for AR, Euler steps for the token flow);
- ``diagnose``: ``forethought psf diagnose --all_stages true`` of ``psf``, ``psf_content`` and every compared
  recipe run (their diagnose.json, run before the evaluation unless newer than the run): the state-shuffle cost
  per position and stage, the AR block-cut ceiling, decoding from clean states vs prior samples vs the mean
  trajectory, and with codes what zeroing them costs and their KL;
- ``checks``: this benchmark's five targets, computed here from those rows (the matched-entropy comparison of
  psf and psf_content with the interval of its difference).

Writes ``--out`` (default ``benchmarks/results/psf_wikitext.json``) and ``<out stem>_curves.png`` beside it and
prints a markdown table. ``--collect-only`` evaluates finished runs without training. Every sample set and
judge pass is cached in ``<runs>/eval-cache/`` (keyed by the run's results.json, seed, sweep point, sample count
and judge; a judge pass keeps every position's NLL and final state, so the common length cap is applied
afterwards), so an interrupted evaluation resumes, and ``--prepare MODEL ...`` samples and judges finished models
while others still train (``psf eval --prepare_only``); ``wall_s`` is the final invocation's,
``evaluation_walls`` lists every evaluating invocation. ``--preset tiny`` runs the whole pipeline at toy size
(generated corpus, L=32, K=4; the smoke test; one evaluation thread, and psf diagnose on 16 windows with 2
permutations, 8 samples and 200 bootstrap resamples), and then the default run folder and output are
``runs/bench-psf-wikitext-tiny/`` and ``benchmarks/results/psf_wikitext_tiny.json``.

    FORETHOUGHT_DATA=../shared/data python benchmarks/psf_wikitext.py [--jobs 2] [--samples 256]
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
import copy
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from forethought.experiments import Job, invocations, run_queue_or_exit, subprocess_env  # noqa: E402
from forethought.psf.config import STATE_ONLY_PRIOR  # noqa: E402

PRESETS = {
    "small": {"config": "small", "runs": ROOT / "runs" / "bench-psf-wikitext",
              "out": ROOT / "benchmarks" / "results" / "psf_wikitext.json", "samples": 256, "references": 256,
              "judge": "smollm2-135m", "n_boot": 1000, "mauve_boot": 100,
              "token_flow_sweep": [1.0, 1.5, 2.0, 3.0]},
    # the planted corpus (configs/psf/recipe_planted.yaml): benchmarks/psf_planted.py runs it once per seed
    "planted": {"config": "planted", "runs": ROOT / "runs" / "bench-psf-planted" / "s0",
                "out": ROOT / "runs" / "bench-psf-planted" / "s0" / "psf_planted_s0.json", "samples": 256,
                "references": 256, "judge": "true generator", "n_boot": 1000, "mauve_boot": 0,
                "token_flow_sweep": [1.0, 1.5, 2.0, 3.0]},
    # the smoke test: one evaluation thread (toy models gain nothing from two, and two OpenMP threads on a busy
    # 2-core machine made each psf diagnose take 45 s instead of 9) and a small diagnosis (DIAGNOSE_TINY)
    "tiny": {"config": "tiny", "runs": ROOT / "runs" / "bench-psf-wikitext-tiny",
             "out": ROOT / "benchmarks" / "results" / "psf_wikitext_tiny.json", "samples": 8, "references": 8,
             "judge": "smollm2-135m", "n_boot": 200, "mauve_boot": 3, "token_flow_sweep": [1.0, 2.0],
             "eval_threads": 1, "diagnose": ["--eval_sequences", "16", "--samples", "8", "--permutations", "2",
                                             "--n_boot", "200"]},
}
# Chosen before any result: one point above the models' own distribution (T 1.2), T 1, and one truncated point,
# so that a sweep brackets a reference entropy that lies either above or below the model's T = 1 entropy.
# The fourth point (T 0.7, top-p 0.9) was added after the first evaluation: the PSF models' sweeps ended 0.01-0.08
# nats above the references' entropy at T 0.8, so they bracketed nothing (the issue allows up to 4 points).
DEFAULT_SWEEP = ["1.2:1.0", "1.0:1.0", "0.8:0.9", "0.7:0.9"]
# The token flow's sweep is over its step temperature (forethought.psf.token_flow: the softmax temperature at every
# Euler step; > 1 lowers the entropy). The small preset's values were chosen after the first evaluation, whose
# last-step temperature left the flow at 4.70-4.75 nats, above the references' 4.37, and from the response of a
# tiny trained flow (tau 1 -> 2 lowered its entropy by 15 %); the WikiText-2 flow has not been run with them yet.
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
    ap.add_argument("--eval-threads", type=int, help="torch threads for evaluation and psf diagnose (default: "
                    "jobs×threads; tiny 1)")
    ap.add_argument("--samples", type=int, help="samples per model and sweep point (default 256; tiny 8)")
    ap.add_argument("--references", type=int, help="held-out reference windows (default 256; tiny 8)")
    ap.add_argument("--sweep", nargs="+", default=DEFAULT_SWEEP, metavar="T:P",
                    help="(temperature:top_p) sweep points, at most 8 (WikiText-2 default: 4)")
    ap.add_argument("--token-flow-sweep", nargs="+", type=float, metavar="TAU",
                    help="the token flow's step temperatures, one sweep point each (default per preset)")
    ap.add_argument("--reference-spread", choices=("even", "random", "first"), default="even",
                    help="where the references lie in the test split (even: evenly spaced over all of it)")
    ap.add_argument("--n-boot", type=int, help="bootstrap resamples of the intervals (default 1000; tiny 200)")
    ap.add_argument("--mauve-boot", type=int, help="bootstrap resamples of MAUVE (default 100; tiny 3)")
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
    ap.add_argument("--compare-runs", nargs="+", default=[], metavar="DIR",
                    help="finished recipe runs on the same corpus evaluated beside the rows, each named by its "
                         "folder name (a run with a state-only prior adds <name>_state_only)")
    ap.add_argument("--ar-layers", default="auto",
                    help="AR baseline depth: auto (the depth whose parameters are closest to PSF encoder + "
                         "decoder), preset (the config's ar.model.n_layer), or a number")
    ap.add_argument("overrides", nargs="*", help="extra overrides for both recipes (after --)")
    args = ap.parse_args(argv)
    preset_defaults(args, PRESETS[args.preset])
    args.diagnose_options = PRESETS[args.preset].get("diagnose", [])  # psf diagnose's defaults unless the preset's
    args.sweep_points = [tuple(float(x) for x in s.split(":")) for s in args.sweep]
    if not 1 <= len(args.sweep_points) <= 8 or any(len(s) != 2 for s in args.sweep_points):
        ap.error("--sweep takes 1 to 8 points written temperature:top_p")
    if not args.eval_threads:
        args.eval_threads = max(1, args.jobs * args.threads)
    return args


def preset_defaults(args: argparse.Namespace, preset: dict[str, Any]) -> None:
    """Every option left unset (None) takes the preset's value of the same name."""
    for key, value in preset.items():
        if getattr(args, key, ...) is None:
            setattr(args, key, value)


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
    if cfg.data.corpus == "planted":
        vocab = cfg.data.planted.vocab_size
    elif spec.startswith("bpe:"):
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
    """``forethought psf token-flow`` beside the finished psf run: its AR table and batches, matched size."""
    return [sys.executable, "-m", "forethought.cli", "psf", "token-flow", "--recipe_run", str(args.runs / "psf"),
            "--out_dir", str(args.runs), "--name", "token_flow", "--device", "cpu", "--param_tolerance",
            str(PARAM_TOLERANCE), "--token_flow.steps", str(TOKEN_FLOW_STEPS), "--resume", "auto"]


def train_all(args: argparse.Namespace) -> None:
    """The pending pieces as ``forethought.cli`` subprocesses (forethought.experiments.run_queue: ``args.jobs`` at
    a time, logs in ``<runs>/<name>.log``, the others stopped when one fails): the two recipes, then the token
    flow, which needs psf's AR model. A piece whose folder holds results.json is skipped."""
    def finished(name: str) -> bool:
        return (args.runs / name / "results.json").is_file()

    for phase in ({"psf": recipe_command(args, "psf"), "psf_content": recipe_command(args, "psf_content")},
                  {"token_flow": token_flow_command(args)}):
        for r in run_queue_or_exit([Job(name, tuple(cmd)) for name, cmd in phase.items()], args.jobs, args.runs,
                                   cwd=ROOT, threads=args.threads, done=finished,
                                   poll_s=0.5 if args.preset == "tiny" else 10):
            print(f"{r.name}: finished, skipped" if r.status == "skipped" else
                  f"{r.name}: finished ({r.wall_s:.0f} s), log {r.log}", flush=True)


def diagnose(run: Path, threads: int, options: list[str]) -> dict:
    """``psf diagnose`` on a finished recipe run (state-shuffle cost, the AR block-cut ceiling, decoding from
    clean / prior / mean states; ``options``: the preset's diagnose settings), unless its diagnose.json is newer
    than its results.json; returns diagnose.json."""
    diag = run / "diagnose.json"
    if not diag.is_file() or diag.stat().st_mtime <= (run / "results.json").stat().st_mtime:
        cmd = [sys.executable, "-m", "forethought.cli", "psf", "diagnose", "--recipe_run", str(run), "--device",
               "cpu", "--all_stages", "true", *options]  # the shuffle cost of every stage: what each stage moved
        proc = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(threads), capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"psf diagnose failed on {run} (exit {proc.returncode}):\n{proc.stdout[-2000:]}"
                     f"{proc.stderr[-2000:]}")
    return json.loads(diag.read_text())


def diagnosed_runs(args: argparse.Namespace) -> dict[str, Path]:
    """The recipe runs ``psf diagnose`` reads, by row name: psf, psf_content and every --compare-runs folder that
    is a recipe run (its results.json lists stages; a compared token flow has none)."""
    compared = {Path(d).name: Path(d) for d in args.compare_runs
                if "stages" in json.loads((Path(d) / "results.json").read_text())}
    return {"psf": args.runs / "psf", "psf_content": args.runs / "psf_content", **compared}


# ---- evaluation --------------------------------------------------------------------------------------------------

def state_only_row(args: argparse.Namespace) -> list[str]:
    """``psf_state_only`` when the psf run trained a state-only prior (``-- --prior.state_only_variant true``: the
    paper's state-only configuration on the same decoder) and the evaluation is not a --prepare of other models."""
    trained = (args.runs / "psf" / STATE_ONLY_PRIOR).is_dir()
    return ["psf_state_only"] if trained and (not args.prepare or "psf" in args.prepare) else []


def eval_config(args: argparse.Namespace) -> Any:
    """The ``forethought psf eval`` settings of this benchmark: the psf run with psf_content and token_flow
    compared (``--prepare``: only the named models, into the cache)."""
    from forethought.psf.evaluate import EvalConfig

    names = tuple(args.prepare) if args.prepare else ROWS
    return EvalConfig(
        recipe_run=str(args.runs / "psf"), models=[*(m for m in ("psf", "psf_mean_trajectory", "ar") if m in names),
                                                   *state_only_row(args)],
        compare=[*(str(args.runs / m) for m in ("psf_content", "token_flow") if m in names),
                 *([] if args.prepare else args.compare_runs)],
        samples=args.samples, references=args.references, reference_spread=args.reference_spread,
        sweep=[[t, p] for t, p in args.sweep_points], token_flow_sweep=args.token_flow_sweep,
        judge=args.judge, judge_batch=args.judge_batch, length_quantile=args.length_quantile,
        mauve_boot=args.mauve_boot, n_boot=args.n_boot, seed=args.seed, device=args.device,
        out=str(args.runs / "eval"), cache_dir=str(args.runs / "eval-cache"), prepare_only=bool(args.prepare))


def evaluate(args: argparse.Namespace) -> dict:
    """``forethought psf eval`` on the finished runs (forethought.psf.evaluate), then this benchmark's checks."""
    import torch

    from forethought.core.io import atomic_write_bytes
    from forethought.psf.evaluate import evaluate as psf_eval

    torch.set_num_threads(args.eval_threads)
    ev = psf_eval(eval_config(args))
    if args.prepare:
        return ev
    rows = ev["models"]
    L = ev["seq_len"]
    png = args.out.with_name(args.out.stem + "_curves.png")
    atomic_write_bytes(png, Path(ev["curves_png"]).read_bytes())
    ps = rows["psf"]
    checks = {
        "psf_flops_le_tenth_of_token_flow": {
            "pass": ps["flops_per_sample"] <= rows["token_flow"]["flops_per_sample"] / 10,
            "psf": ps["flops_per_sample"], "token_flow": rows["token_flow"]["flops_per_sample"],
            "ratio": ps["flops_per_sample"] / rows["token_flow"]["flops_per_sample"]},
        "psf_beats_content_at_matched_entropy": _beats(ps, rows["psf_content"],
                                                       ev["differences"]["psf - psf_content"]["matched_entropy"]),
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
    refs = ev["references"]
    settings = {
        "preset": args.preset, "corpus": ev["corpus"], "tokenizer": ev["tokenizer"],
        "seq_len": L, "blocks": ev["blocks"], "samples_per_point": args.samples,
        "sweep": [{"temperature": a, "top_p": b} for a, b in args.sweep_points],
        "token_flow_sweep": {"knob": "step_temperature", "values": args.token_flow_sweep,
                             "rounding_temperature": 1.0},
        "judge": args.judge, "judge_max_tokens": ev["judge_max_tokens"], "length_quantile": args.length_quantile,
        "references": refs["n"], "reference_split": refs["split"], "reference_spread": refs["spread"],
        "reference_offsets": {"first": refs["first_offset"], "last_end": refs["last_end"],
                              "split_tokens": refs["split_tokens"]},
        "reference_judge_tokens": refs.get("judge_tokens", refs.get("tokens")), "reference_gen_ppl": refs["gen_ppl"],
        "target_entropy": ev["target_entropy"], "target_entropy_interval": ev["target_entropy_interval"],
        "seed": args.seed, "runs": str(args.runs), "recipe_overrides": list(args.overrides),
        "token_flow_steps": TOKEN_FLOW_STEPS, "bootstrap": ev["bootstrap"],
        "jobs": args.jobs, "threads_per_job": args.threads, "eval_threads": args.eval_threads,
        "evaluation": f"forethought psf eval (its results: {args.runs / 'eval' / 'results.json'})",
        "conventions": {**ev["conventions"],
                        "train_wall_s": "trainer wall time (trainings ran jobs at a time on the machine's cores)",
                        "train_tokens": "psf rows: all PSF model stages (the AR budget); the prior's steps are "
                                        "separate"},
    }
    return {"rows": rows, "checks": checks, "settings": settings, "timings": ev["timings"], "png": png,
            "cache_hits": ev["cache_hits"], "differences": ev["differences"]}


def _beats(a: dict, b: dict, diff: dict) -> dict:
    x, y = a["gen_ppl_at_matched_entropy"], b["gen_ppl_at_matched_entropy"]
    out = {"pass": None if x is None or y is None else x < y, "psf": x, "psf_content": y,
           "psf_minus_content": diff["gen_ppl_diff"], "interval": diff["interval"],
           "interval_below_zero": None if diff["interval"] is None else diff["interval"][1] < 0}
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
        cells = [_fmt(res[name].get(c)) for c in cols]
        iv = res[name]["matched_entropy"]["interval"]
        if iv:  # the 95 % bootstrap interval of the matched-entropy gen-PPL
            cells[0] += f" [{_fmt(iv[0])}, {_fmt(iv[1])}]"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    for k, v in res["checks"].items():
        lines.append(f"- {k}: {v['pass']} ({', '.join(f'{a}={_fmt(b)}' for a, b in v.items() if a != 'pass')})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.preset != "tiny":
        _default_data_root()
    t0 = time.time()
    if not args.collect_only and not args.prepare:
        train_all(args)
    if args.train_only:
        return
    diagnoses = {} if args.prepare else {name: diagnose(run, args.eval_threads, args.diagnose_options)
                                          for name, run in diagnosed_runs(args).items()}
    ev = evaluate(args)
    command = " ".join(["python", *(sys.argv if argv is None else ["benchmarks/psf_wikitext.py", *argv])])
    seen = invocations(args.runs, command)
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
           "settings": ev["settings"], **{name: ev["rows"][name] for name in ROWS},
           "other_rows": {name: row for name, row in ev["rows"].items() if name not in ROWS},
           "differences": ev["differences"], "checks": ev["checks"], "diagnose": diagnoses,
           "eval_timings_s": ev["timings"], "eval_cache_hits": ev["cache_hits"], "curves_png": ev["png"].name}
    res["settings"]["FORETHOUGHT_DATA"] = os.environ.get("FORETHOUGHT_DATA", "")
    from forethought.core.io import atomic_write_text

    atomic_write_text(args.out, json.dumps(res, indent=2, default=_json_default) + "\n")
    print(markdown(res))
    print(f"\nwrote {args.out} and {ev['png']}")


def _json_default(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


if __name__ == "__main__":
    main()
