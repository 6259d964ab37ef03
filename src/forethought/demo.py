"""``forethought demo``: a tiny end-to-end run of each system on CPU in a few minutes, with a markdown report.

Myopia: the synthetic pre-caching task (vanilla vs myopic, probes), language modelling (vanilla, myopic,
local-myopic, transformer bigram) and future-token probes. Data is generated unless ``FORETHOUGHT_DATA`` points
at a data root with WikiText-2, which is then used. Numbers at this size prove the pipeline, not the science.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from forethought.cli import resolve_config_path
from forethought.core.config import field, load_config
from forethought.core.io import atomic_write_text
from forethought.core.run import Run, RunConfig


@dataclass
class DemoConfig:
    run: RunConfig = field(RunConfig(name="demo"), "run folder, seed, device")
    synthetic_steps: int = field(600, "training steps per model on the synthetic task")
    lm_steps: int = field(300, "training steps per language-model variant")
    corpus: str = field("auto", "'auto' = wikitext-2 when FORETHOUGHT_DATA has it, else the generated corpus")


def _corpus(cfg: DemoConfig) -> tuple[str, str]:
    if cfg.corpus != "auto":
        return cfg.corpus, "gpt2"
    from forethought.data.corpora import data_root

    root = data_root()
    if root is not None and (root / "wikitext-2" / "train.txt").is_file():
        return "wikitext-2", "gpt2"
    return "generated", "bpe:512"


def run(cfg: DemoConfig, resume: str | None = None) -> dict:
    from forethought.myopia import lm, probe, synthetic

    t0 = time.perf_counter()
    previous = Path(cfg.run.out_dir) / cfg.run.name
    if resume is None and (previous / "env.json").is_file():
        shutil.rmtree(previous)  # the demo starts over unless asked to resume (only ever a forethought run folder)
    root = Run.create(cfg.run.out_dir, cfg.run.name, cfg)
    sub = [f"--run.out_dir={root.dir}", f"--run.seed={cfg.run.seed}", f"--run.device={cfg.run.device}"]
    scfg = load_config(synthetic.SyntheticConfig, resolve_config_path("myopia", "synthetic", "tiny"),
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
    parts = ["# forethought demo", "",
             f"Tiny CPU run of every system ({time.perf_counter() - t0:.0f} s). Numbers at this size prove the "
             "pipeline, not the science; see README for the benchmarks.", ""]
    for name in ("synthetic", "lm", "probe"):
        text = (root.dir / name / "report.md").read_text()
        parts.append(_relink(text, name))
    atomic_write_text(root.path("report.md"), "\n".join(parts))
    print(f"\ndemo report: {root.path('report.md')}")
    return {"report": str(root.path("report.md")), "wall_s": time.perf_counter() - t0}


def _relink(markdown: str, folder: str) -> str:
    """Sub-reports link their PNGs relative to their own folder; make the links work from the demo folder."""
    out = []
    for line in markdown.splitlines():
        if line.startswith("![") and "](" in line:
            alt, target = line.split("](", 1)
            line = f"{alt}]({Path(folder) / target}"
        out.append(line.replace("# ", "## ", 1) if line.startswith("# ") else line)
    return "\n".join(out) + "\n"
