"""``forethought demo``: a tiny end-to-end run of each system on CPU in a few minutes, with a markdown report.

* Myopia: the synthetic pre-caching task (vanilla vs myopic, probes), language modelling (vanilla, myopic,
  local-myopic, transformer bigram) and future-token probes.
* PredGen: Predictor, Generator and PredGen fine-tuned for a few steps (SmolLM2-135M offline + LoRA) on SST-2
  when the data root has it, else on a generated review-sentiment file.
* PSF: the whole multi-stage recipe at toy size (plus the AR baseline), then a few decoded samples.

Data is generated unless ``FORETHOUGHT_DATA`` points at a data root (WikiText-2, SST-2), which is then used.
Numbers at this size prove the pipeline, not the science.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from forethought.cli import resolve_config_path
from forethought.core.config import at_least, field, load_config
from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_text
from forethought.core.run import Run, RunConfig


# This module imports no torch (each system's part imports its own modules when it runs): the CLI loads and checks
# DemoConfig, and prints --help, before the heavy libraries load.
@dataclass
class DemoConfig:
    run: RunConfig = field(RunConfig(name="demo"), "run folder, seed, device")
    synthetic_steps: int = field(1200, "training steps per model on the synthetic task (the demo preset: window 6, "
                                 "sin(8·x), d 32; about 30 s per model on CPU)")
    lm_steps: int = field(300, "training steps per language-model variant")
    corpus: str = field("auto", "'auto' = wikitext-2 when FORETHOUGHT_DATA has it, else the generated corpus")
    systems: list[Literal["myopia", "predgen", "psf"]] = field(["myopia", "predgen", "psf"], "which systems to run")
    predgen_base: str = field("smollm2-135m", "HF causal LM for the PredGen part")
    predgen_steps: int = field(12, "training steps per PredGen method (batch 8)")
    psf_steps: int = field(300, "PSF base-stage steps (the other stages keep the tiny preset's)")

    def validate(self) -> None:
        # checked when the config loads, so a typo never costs the previous demo (a rerun deletes its folder)
        at_least(self, 1, "synthetic_steps", "lm_steps", "predgen_steps", "psf_steps")
        if not self.corpus.strip():
            raise ForethoughtError(f"corpus must be 'auto', a corpus name or a .txt file, got {self.corpus!r}")
        if not self.predgen_base.strip():
            raise ForethoughtError(f"predgen_base must name an HF causal LM (hub id, folder or alias), got "
                                   f"{self.predgen_base!r}")


def _corpus(cfg: DemoConfig) -> tuple[str, str]:
    if cfg.corpus != "auto":
        return cfg.corpus, "gpt2"
    from forethought.core.env import data_root

    root = data_root()
    if root is not None and (root / "wikitext-2" / "train.txt").is_file():
        return "wikitext-2", "gpt2"
    return "generated", "bpe:512"


# Written into the demo's run folder when the demo creates it. The demo deletes (to start over) or resumes into
# a folder only when this marker is there, so a user's own run that shares the name is never touched.
MARKER = ".forethought-demo"


def claim_folder(folder: Path, resume: str | None) -> None:
    """Make ``folder`` ready for a demo: absent or empty is fine; a folder this demo created (it holds
    :data:`MARKER`) is deleted to start over, or kept when resuming; anything else is refused, untouched."""
    if not folder.exists() or (folder.is_dir() and not any(folder.iterdir())):
        return
    if not (folder / MARKER).is_file():
        raise ForethoughtError(f"demo: {folder} exists and was not created by 'forethought demo' (no {MARKER} in "
                               "it); remove it or choose another --run.name")
    if resume is None:
        shutil.rmtree(folder)  # the demo starts over unless asked to resume


def run(cfg: DemoConfig, resume: str | None = None) -> dict:
    t0 = time.perf_counter()
    claim_folder(Path(cfg.run.out_dir) / cfg.run.name, resume)
    root = Run.create(cfg.run.out_dir, cfg.run.name, cfg)
    atomic_write_text(root.path(MARKER), "created by forethought demo; the demo may delete this folder\n")
    sub = [f"--run.out_dir={root.dir}", f"--run.seed={cfg.run.seed}", f"--run.device={cfg.run.device}",
           f"--run.precision={cfg.run.precision}", f"--run.log_with={cfg.run.log_with}"]
    sections = []
    if "myopia" in cfg.systems:
        _myopia(cfg, root, sub, resume)
        sections += ["synthetic", "lm", "probe"]
    if "predgen" in cfg.systems:
        _predgen(cfg, root, sub, resume)
        sections.append("predgen")
    if "psf" in cfg.systems:
        _psf(cfg, root, sub, resume)
        sections.append("psf")
    parts = ["# forethought demo", "",
             f"Tiny CPU run of every system ({time.perf_counter() - t0:.0f} s). Numbers at this size prove the "
             "pipeline, not the science; see docs/results/ for the benchmarks.", ""]
    for name in sections:
        text = (root.dir / name / "report.md").read_text()
        parts.append(_relink(text, name))
    atomic_write_text(root.path("report.md"), "\n".join(parts))
    print(f"\ndemo report: {root.path('report.md')}")
    return {"report": str(root.path("report.md")), "wall_s": time.perf_counter() - t0}


def _myopia(cfg: DemoConfig, root: Run, sub: list[str], resume: str | None) -> None:
    from forethought.myopia import lm, probe, synthetic

    scfg = load_config(synthetic.SyntheticConfig, resolve_config_path("myopia", "synthetic", "demo"),
                       sub + ["--run.name=synthetic", f"--train.steps={cfg.synthetic_steps}"])
    synthetic.run(scfg, resume=resume)
    corpus, tok = _corpus(cfg)
    lcfg = load_config(lm.LMConfig, resolve_config_path("myopia", "lm", "tiny"),
                       sub + ["--run.name=lm", f"--train.steps={cfg.lm_steps}", f"--data.corpus={corpus}",
                              f"--data.tokenizer={tok}", f"--train.checkpoint_every={cfg.lm_steps}"])
    lm.run(lcfg, resume=resume)
    pcfg = load_config(probe.ProbeConfig, None, sub + ["--run.name=probe", f"--lm_run={root.dir / 'lm'}",
                                                        "--k_max=3", "--fit_sequences=128", "--eval_sequences=32"])
    probe.run(pcfg)


def review_file(path: Path, n: int = 400, seed: int = 0) -> Path:
    """A generated sentiment task (CSV: text, label) whose label follows the review's words."""
    import csv
    import random

    rng = random.Random(seed)
    good = ["wonderful", "moving", "brilliant", "funny", "charming", "smart", "beautiful", "gripping"]
    bad = ["boring", "clumsy", "dull", "tedious", "awful", "shallow", "predictable", "messy"]
    nouns = ["film", "story", "cast", "script", "ending", "soundtrack", "pacing", "director"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for _ in range(n):
            positive = rng.random() < 0.5
            main, other = (good, bad) if positive else (bad, good)
            words = [f"the {rng.choice(nouns)} is {rng.choice(main)}", f"the {rng.choice(nouns)} feels "
                     f"{rng.choice(main)}"]
            if rng.random() < 0.4:
                words.append(f"though the {rng.choice(nouns)} is a bit {rng.choice(other)}")
            rng.shuffle(words)
            w.writerow([", ".join(words).capitalize() + ".", "positive" if positive else "negative"])
    return path


# PredGen's adapter only, measured on the demo's task (12 steps): adapter 0.66 / 0.75 / 0.97 at scales 1 / 10 / 30.
# The Predictor's linear head on the raw last state diverged at 30 (loss 2.35, accuracy 0.72; 0.81 at 1).
HEAD_LR_SCALE = 30


def _predgen(cfg: DemoConfig, root: Run, sub: list[str], resume: str | None) -> None:
    import json

    from forethought.core.env import data_root
    from forethought.predgen import commands

    data = data_root()
    if data is not None and (data / "sst2" / "train.tsv").is_file():
        task = ["--task.name=sst2", "--task.max_eval_examples=32"]
        what = "SST-2 (a 32-example dev subset)"
    else:
        path = review_file(root.dir / "predgen" / "reviews.csv")
        task = [f"--task.name={path}", "--task.target_field=label", "--task.max_eval_examples=32",
                "--task.template", r"Review: {text}\nSentiment:"]  # typed as on a shell: \n is decoded
        what = "generated review sentiment (32 held-out examples)"
    rows = []
    for method in ("predictor", "generator", "predgen"):
        pcfg = load_config(commands.PredGenConfig, resolve_config_path("predgen", "train", "tiny"),
                           sub + task + [f"--run.out_dir={root.dir / 'predgen'}", f"--run.name={method}",
                                         f"--method={method}", f"--base={cfg.predgen_base}",
                                         f"--train.steps={cfg.predgen_steps}", "--train.batch_size=8",
                                         "--train.lr=5e-4",
                                         f"--head.lr_scale={HEAD_LR_SCALE if method == 'predgen' else 1}"])
        r = commands.run_train(pcfg, resume=resume)
        rows.append((method, r))
    lines = ["# PredGen", "", f"{cfg.predgen_base} + LoRA r=4, {cfg.predgen_steps} steps x 8 examples per method, "
             f"on {what}. PredGen's task adapter starts from random weights while the Generator writes with the "
             "model's pretrained output layer, so in a dozen steps the adapter trains at "
             f"{HEAD_LR_SCALE}x the learning rate (head.lr_scale {HEAD_LR_SCALE}; at 1 it reached 0.66 here "
             "against its own decoded answer's 0.97). The Predictor's linear head keeps the base rate (it "
             "diverged at 30x). The benchmarks use one rate for all.", "",
             "| method | accuracy | decoded answer accuracy | train (s) | examples/s |", "|---|---|---|---|---|"]
    for method, r in rows:
        dec = f"{r['decoded']['accuracy']:.3f}" if "decoded" in r else "-"
        lines.append(f"| {method} | {r['accuracy']:.3f} | {dec} | {r['train_wall_s']:.0f} | "
                     f"{r['examples_per_s']:.1f} |")
    atomic_write_text(root.dir / "predgen" / "report.md", "\n".join(lines) + "\n")
    atomic_write_text(root.dir / "predgen" / "results.json", json.dumps(dict(rows), indent=1))


def _psf(cfg: DemoConfig, root: Run, sub: list[str], resume: str | None) -> None:
    from forethought.psf import generate, recipe

    corpus, tok = _corpus(cfg)
    rcfg = load_config(recipe.RecipeConfig, resolve_config_path("psf", "recipe", "tiny"),
                       sub + ["--run.name=psf", f"--base.train.steps={cfg.psf_steps}"]
                       + ([] if corpus == "generated" else [f"--data.corpus={corpus}"]))
    recipe.run(rcfg, resume=resume)
    scfg = load_config(generate.SampleConfig, None, [f"--recipe_run={root.dir / 'psf'}", "--n=4", "--temperature=0.8",
                                                   f"--seed={cfg.run.seed}", f"--device={cfg.run.device}"])
    generate.sample(scfg)
    samples = (root.dir / "psf" / "samples" / "samples.txt").read_text().split("\n\n==========\n\n")
    report = (root.dir / "psf" / "report.md").read_text().rstrip()
    shown = "\n".join(f"{i + 1}. `{t.strip()[:300]!r}`" for i, t in enumerate(samples))
    atomic_write_text(root.dir / "psf" / "report.md",
                      f"{report}\n\nUnconditional samples (prior -> states -> all blocks in parallel):\n\n{shown}\n")


def _relink(markdown: str, folder: str) -> str:
    """Sub-reports link their PNGs relative to their own folder; make the links work from the demo folder."""
    out = []
    for line in markdown.splitlines():
        if line.startswith("![") and "](" in line:
            alt, target = line.split("](", 1)
            line = f"{alt}]({Path(folder) / target}"
        out.append(line.replace("# ", "## ", 1) if line.startswith("# ") else line)
    return "\n".join(out) + "\n"
