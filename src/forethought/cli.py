"""The ``forethought`` console script: ``forethought <system> <verb> [--config FILE|PRESET] [--section.key VALUE ...]``.

Every command takes a typed config (a dataclass): defaults, then ``--config`` (a YAML file, or the name of a
preset shipped in ``forethought/configs/<system>/``), then dotted overrides. ``--resume auto`` continues the
run from its newest complete checkpoint. User errors print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import shutil
import sys
import textwrap
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from forethought.core.config import help_sections, load_config, show_yaml
from forethought.core.errors import ForethoughtError

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
# experiments.spec.SPEC_DIR (a test checks they agree), named here without importing the experiments package,
# which loads numpy: a refused --config answers before the heavy libraries load
SPEC_DIR = Path(__file__).resolve().parent / "experiments" / "specs"


@dataclass
class Command:
    system: str
    verb: str
    help: str
    target: str  # "module:function" taking (cfg, resume): imported only once the config has loaded
    config: str  # "module:Config", from a module that imports no torch, so --help and bad input answer fast
    # what --resume takes: "checkpoint" = auto or one checkpoint folder (one model trains), "auto" = auto only
    # (several models or stages train, each from its own newest checkpoint), "" = no --resume (nothing trains)
    resume: Literal["checkpoint", "auto", ""] = ""
    spec_arg: bool = False  # an experiment verb: its first word is the spec (positional)
    checks_commands: bool = False  # its target takes parse=: checks other forethought commands without running them

    def config_class(self) -> type:
        return _load(self.config)

    def run(self, cfg: Any, resume: str | None) -> Any:
        """Import the command's module (torch, models) and run it on a loaded, checked config."""
        if self.checks_commands:
            return _load(self.target)(cfg, resume=resume, parse=check_command)
        return _load(self.target)(cfg, resume=resume)


COMMANDS = [
    Command("myopia", "synthetic", "train vanilla vs myopic models on the synthetic pre-caching task; "
            "normalised loss per p and per-layer ridge probes",
            "forethought.myopia.synthetic:run", "forethought.myopia.config:SyntheticConfig", resume="auto"),
    Command("myopia", "lm", "vanilla vs myopic language-model training (our GPT from scratch or an HF model); "
            "myopia gap overall and per position, local-myopic bonus, transformer-bigram baseline",
            "forethought.myopia.lm:run", "forethought.myopia.config:LMConfig", resume="auto"),
    Command("myopia", "gradients", "the pre-caching gradient: during vanilla training, the vanilla vs myopic "
            "gradient on fixed batches, per layer (relative difference, cosine)",
            "forethought.myopia.gradients:run", "forethought.myopia.config:GradientsConfig", resume="checkpoint"),
    Command("myopia", "probe", "Future-Lens probes: from layer l at position t predict token t+k (k=1..N), "
            "vanilla vs myopic checkpoints", "forethought.myopia.probe:run", "forethought.myopia.config:ProbeConfig"),
    Command("myopia", "init-model", "a seeded random-init HF model of a published architecture (pythia-14m) with the "
            "run's tokenizer as vocabulary, as a run folder for 'myopia lm --base <folder>'",
            "forethought.myopia.init_model:run", "forethought.myopia.config:InitModelConfig"),
    Command("myopia", "step-cost", "wall time of a training step, myopic / vanilla (our GPT, an HF Llama, a "
            "Pythia-shaped GPT-NeoX; interleaved steps, medians), beside the naive per-position estimate",
            "forethought.myopia.step_cost:run", "forethought.myopia.config:StepCostConfig"),
    Command("myopia", "families", "make_myopic on every model family: forward unchanged, no gradient into earlier "
            "states, one-pass gradients = the per-position form (float64), and the step cost of a small model",
            "forethought.myopia.families:run", "forethought.myopia.config:FamiliesConfig"),
    Command("myopia", "attention-check", "the one-pass myopic attention on a device (CUDA: its fused kernel) "
            "against the explicit reference form and float64, forward and gradients, fp32 and bf16",
            "forethought.myopia.attention_check:run", "forethought.myopia.config:AttentionCheckConfig"),
    Command("myopia", "sin-block", "can one GPT block learn sin(10x) from a linear embedding of x (length-1 "
            "sequences, MSE)? the held-out MSE over training, e.g. per --model.activation",
            "forethought.myopia.sin_block:run", "forethought.myopia.config:SinBlockConfig", resume="checkpoint"),
    Command("myopia", "synthetic-why", "why the synthetic task's model does or does not learn under a setting "
            "(--model.init, --model.final_norm): loss, gradient signal-to-noise at the first MLP, the blocks' share "
            "of the head's input and a layer-1 probe of sin(10x), every eval_every steps",
            "forethought.myopia.synthetic_why:run", "forethought.myopia.config:SyntheticWhyConfig",
            resume="checkpoint"),
    Command("psf", "recipe", "Predictive State Flow: base -> landing -> self-realized -> codes -> flow prior "
            "(-> longer blocks), each stage resumable; optional AR baseline", "forethought.psf.recipe:run",
            "forethought.psf.config:RecipeConfig", resume="auto"),
    Command("psf", "sample", "sample a 'psf recipe' run (PSF or AR; unconditional or prompted) to JSONL + text",
            "forethought.psf.generate:sample", "forethought.psf.config:SampleConfig"),
    Command("psf", "diagnose", "diagnose a 'psf recipe' run: state-shuffle cost per position (codes kept, zeroed, "
            "shuffled), the AR block-cut ceiling, decoding from clean states vs prior samples vs the mean "
            "trajectory; writes diagnose.json", "forethought.psf.diagnose:diagnose",
            "forethought.psf.config:DiagnoseConfig"),
    Command("psf", "eval", "evaluate a 'psf recipe' run (PSF, its mean trajectory, the AR baseline, --compare runs "
            "such as the content-state ablation or a token flow): sweeps of gen-PPL, unigram entropy, n-gram "
            "repetition, MAUVE (planted: exact NLL), bootstrap intervals, differences, matched entropy, cost",
            "forethought.psf.evaluate:evaluate", "forethought.psf.config:EvalConfig"),
    Command("psf", "prompted", "prompted continuations on the planted corpus: a prompt-conditioned prior (one 'psf "
            "recipe' run) against replacement on the unconditional prior (another), scored exactly by the true "
            "generator, with bootstrap intervals over prompts; also each prior's unprompted samples",
            "forethought.psf.prompted:run", "forethought.psf.config:PromptedConfig"),
    Command("psf", "ceiling", "the planted corpus's Bayes-optimal parallel decoders (exact predictive states, with "
            "and without the landing token and codes): the persistence PSF without codes can reach at most",
            "forethought.psf.ceiling:run", "forethought.psf.config:CeilingConfig"),
    Command("psf", "token-flow", "train the token-level flow baseline (ELF-style, over all L token embeddings) "
            "beside a finished 'psf recipe' run with the AR baseline: its frozen token table, the recipe's batches, "
            "parameters matched to PSF encoder + decoder; 'psf eval --compare' evaluates the folder",
            "forethought.psf.token_flow_run:run", "forethought.psf.config:TokenFlowRunConfig", resume="checkpoint"),
    Command("predgen", "train", "fine-tune an HF causal LM to classify / regress with --method predictor | generator "
            "| predgen (PEFT LoRA/AdaLoRA/DoRA or full), then evaluate; saves adapter + head; --method base "
            "evaluates the untrained base model zero-shot",
            "forethought.predgen.commands:run_train", "forethought.predgen.config:PredGenConfig", resume="checkpoint"),
    Command("predgen", "eval", "evaluate a trained model on its task's eval (or train) split",
            "forethought.predgen.commands:run_eval", "forethought.predgen.config:EvalConfig"),
    Command("predgen", "predict", "predict on a file of new inputs with a trained model (writes JSONL)",
            "forethought.predgen.commands:run_predict", "forethought.predgen.config:PredictConfig"),
    Command("predgen", "compare", "two runs' predictions on the same eval examples, paired (or a run's adapter vs "
            "its decoded answer, or two curve points): difference, bootstrap 95 % interval, McNemar",
            "forethought.predgen.compare:run_compare", "forethought.predgen.config:CompareConfig"),
    Command("predgen", "mine", "MINE estimates of I(Y;Z), pooled vs token-level states of a trained model, "
            "fitted on one half and evaluated on the other, over seeds, with H(Y) and a plot; --words K: the input "
            "words most associated with each answer",
            "forethought.predgen.mine:run_mine", "forethought.predgen.config:MineConfig"),
    Command("predgen", "answer-tokens", "how many tokens a task's answers take (with EOS) under a base's "
            "tokenizer, and its prompts' length: which tasks can separate the methods",
            "forethought.predgen.answer_tokens:run", "forethought.predgen.config:AnswerTokensConfig"),
    Command("predgen", "speed", "what PredGen costs: its training step against the Generator's (interleaved), the "
            "step's parts, and the prompt-logit, KV-cache and expected-value speed-ups against the code they "
            "replaced", "forethought.predgen.speed:run", "forethought.predgen.config:SpeedConfig"),
    Command("presets", "memory", "the expected training memory of each paper preset on one GPU (the project's "
            "estimate + a stated activation formula, models built on the meta device) and whether it fits the card",
            "forethought.presets:run", "forethought.presets:PresetMemoryConfig"),
    Command("experiment", "list", "the shipped experiment specs: name, system, runs, what each costs",
            "forethought.experiments.commands:list_specs", "forethought.experiments.commands:ListConfig"),
    Command("experiment", "run", "run an experiment spec's runs (resumable: finished runs are skipped), archive "
            "each, then collect; --dry_run true prints its commands and checks that they parse",
            "forethought.experiments.commands:run", "forethought.experiments.commands:ExperimentConfig",
            spec_arg=True, checks_commands=True),
    Command("experiment", "collect", "an experiment's finished runs (run folders, else the archive) -> one results "
            "JSON: measures over seeds, seed-paired comparisons, checks, provenance; and its plots",
            "forethought.experiments.commands:collect", "forethought.experiments.commands:ExperimentConfig",
            spec_arg=True),
    Command("experiment", "render", "an experiment's results section (markdown) from its collected JSON",
            "forethought.report.experiment:render", "forethought.experiments.commands:ExperimentConfig",
            spec_arg=True),
    Command("experiment", "gpu-check", "every system on one GPU against deadlines (at most 10 minutes): the synthetic "
            "task, PredGen on SST-2, the myopic step cost, the PSF base stage -> benchmarks/results/gpu_check.json; "
            "--dry_run true: a few steps of each on the CPU", "forethought.gpu_check:run",
            "forethought.gpu_check:GpuCheckConfig"),
    Command("demo", "", "a tiny end-to-end run of every system (minutes on 2 CPU cores) with a markdown report",
            "forethought.demo:run", "forethought.demo:DemoConfig", resume="auto"),
    Command("myopia", "arithmetic", "the reference's multiplication task (reversed digits, zero padding as filler), "
            "GPT-2 from scratch, vanilla vs myopic: loss on the product only, exact-product accuracy per digit count",
            "forethought.myopia.arithmetic:run", "forethought.myopia.config:ArithmeticConfig", resume="auto"),
]


def _load(target: str) -> Callable:
    mod, name = target.split(":")
    return getattr(importlib.import_module(mod), name)


def presets(system: str) -> list[str]:
    d = CONFIG_DIR / system
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def resolve_config_path(system: str, verb: str, spec: str | None) -> Path | None:
    """A YAML path, or a preset name: ``tiny`` -> configs/<system>/<verb>_tiny.yaml (or <system>/tiny.yaml)."""
    if spec is None:
        return None
    p = Path(spec)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    for cand in (CONFIG_DIR / system / f"{verb}_{spec}.yaml", CONFIG_DIR / system / f"{spec}.yaml"):
        if cand.is_file():
            return cand
    members = preset_family(system, verb, spec)
    if members:  # e.g. predgen's `paper`: one preset per dataset, no single run to pick for the user
        runners = " or ".join(f"'forethought experiment run {s}'" for s in family_specs(system, spec))
        raise ForethoughtError(f"config '{spec}' of '{system} {verb}' is a family of {len(members)} presets, one "
                               f"run each: --config {spec}_<name> with <name> one of {', '.join(members)}"
                               + (f"; {runners} runs them all" if runners else ""))
    known = ", ".join(presets(system)) or "none"
    raise ForethoughtError(f"config '{spec}' is neither a YAML file nor a preset of '{system} {verb}' "
                           f"(presets: {known})")


def preset_family(system: str, verb: str, name: str) -> list[str]:
    """The members of the preset family ``name``: ``paper`` -> [arc-easy, boolq, ...] for the presets
    configs/<system>/<verb>_paper_<member>.yaml (a family has no <verb>_<name>.yaml of its own)."""
    prefix = f"{verb}_{name}_"
    return sorted(n.removeprefix(prefix) for n in presets(system) if n.startswith(prefix))  # no glob of user text


def family_specs(system: str, name: str) -> list[str]:
    """The shipped experiment specs of ``system`` that run the family ``name``: a step with
    ``--config <name>_{placeholder}`` (its grid names the members)."""
    out = []
    for path in sorted(SPEC_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        steps = [step for group in data.get("runs", []) for step in group.get("steps", [])]
        if data.get("system") == system and any(f"--config {name}_{{" in step for step in steps):
            out.append(path.stem)
    return out


def help_width() -> int:
    """The terminal's width (``COLUMNS`` when set), at most 100 columns: help stays readable on a wide screen."""
    return max(40, min(shutil.get_terminal_size((100, 24)).columns, 100))


def _wrap(text: str, indent: int = 0) -> str:
    return textwrap.fill(text, help_width(), subsequent_indent=" " * indent, break_long_words=False,
                         break_on_hyphens=False)


_RESUME_HELP = {"checkpoint": "'auto' = continue from the newest complete checkpoint; or a checkpoint folder "
                              "<run>/step-NNNNNN",
                "auto": "'auto' = continue every model or stage from its own newest complete checkpoint and "
                        "skip the finished ones"}


def _parser(cmd: Command) -> argparse.ArgumentParser:
    cls = cmd.config_class()
    name = f"forethought {cmd.system} {cmd.verb}".strip()
    epilog = "\n".join([_wrap("config keys (override with --section.key VALUE; the defaults shown are this "
                              "command's, before --config):"), *help_sections(cls, help_width())])
    p = argparse.ArgumentParser(prog=name, description=_wrap(cmd.help), epilog=epilog,
                                formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(prog,
                                                                                                  width=help_width()))
    preset_names = ", ".join(presets(cmd.system)) or "none"
    p.add_argument("--config", help=f"YAML file or preset name (presets: {preset_names})")
    if cmd.resume:
        p.add_argument("--resume", default=None, help=_RESUME_HELP[cmd.resume])
    return p


def _top_help() -> str:
    lines = ["usage: forethought <system> <verb> [--config FILE|PRESET] [--section.key VALUE ...] [--resume auto]",
             "       forethought config show|validate <system> <verb> [--config ...] [--section.key VALUE ...]",
             "", "Study and exploit what a language model's states know about the future.", "", "commands:"]
    for c in COMMANDS:
        lines.append(_wrap(f"  {(c.system + ' ' + c.verb).strip():<20} {c.help}", 23))
    lines += ["", _wrap(f"  {'config show':<20} {CONFIG_VERBS['show']}", 23),
              _wrap(f"  {'config validate':<20} {CONFIG_VERBS['validate']}", 23),
              "", "Run 'forethought <system> <verb> --help' for a command's options and config keys.",
              _wrap("Multi-process / multi-GPU: accelerate launch -m forethought.cli <system> <verb> ... "
                    "(or torchrun --nproc-per-node N -m forethought.cli ...)")]
    return "\n".join(lines)


CONFIG_VERBS = {
    "show": "print a command's resolved config (defaults, then --config, then overrides) as YAML, each key with "
            "its type, default and help as comments; the output is a --config file for that command",
    "validate": "check a command's config and --resume without loading anything: one line, OK or the error "
                "(exit status 2)",
}


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # e.g. `forethought --help | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's last flush at exit cannot fail again
        return 1


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # peft calls a transformers property that transformers 5 deprecates; it says nothing a user can act on.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_top_help())
        return 0
    if argv[0] in ("--version", "-V"):
        from forethought import __version__

        print(__version__)
        return 0
    try:
        if argv[0] == "config":
            return _config(argv[1:])
        cmd, cfg, resume = _configured(argv)
        cmd.run(cfg, resume)
        return 0
    except ForethoughtError as e:
        print(f"forethought: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("forethought: interrupted", file=sys.stderr)
        return 130


def _config(argv: list[str]) -> int:
    """``forethought config show|validate <system> <verb> ...``: the command's config loaded and checked as
    running it would (its --resume too), and nothing more: no torch, no data, no model, nothing written."""
    if not argv or argv[0] in ("-h", "--help"):
        print(_wrap("usage: forethought config show|validate <system> <verb> [--config FILE|PRESET] "
                    "[--section.key VALUE ...] [--resume ...]", 7) + "\n")
        print("\n".join(_wrap(f"  {verb:<10} {text}", 13) for verb, text in CONFIG_VERBS.items()))
        return 0
    if argv[0] not in CONFIG_VERBS:
        raise ForethoughtError(f"unknown command 'config {argv[0]}'; 'config' has: {', '.join(CONFIG_VERBS)}")
    if len(argv) < 2:
        raise ForethoughtError(f"name a command: forethought config {argv[0]} <system> <verb> (e.g. predgen train)")
    cmd, cfg, _ = _configured(argv[1:])
    name = f"{cmd.system} {cmd.verb}".strip()
    if argv[0] == "validate":
        print(f"OK: the config of 'forethought {name}' is valid")
        return 0
    command = " ".join(["forethought", name, *(shlex.quote(a) for a in argv[1 + len(name.split()):])])
    print(f"# the resolved config of: {command}\n# rerun it with: forethought {name} --config <this file>\n")
    print(show_yaml(cfg), end="")  # a file, not help: the same lines whatever the terminal's width
    return 0


def check_resume(cmd: Command, resume: str | None) -> str | None:
    """``--resume`` checked as the config is, before any data or model loads: 'auto', or (for a command that
    trains one model) a checkpoint folder that exists. 'none' / 'never' / '' mean a fresh run (None)."""
    if resume in (None, "", "none", "never"):
        return None
    if resume == "auto":
        return resume
    name = f"{cmd.system} {cmd.verb}".strip()
    if cmd.resume == "auto":
        raise ForethoughtError(f"{name} takes --resume auto (every model or stage continues from its own newest "
                               f"checkpoint), not --resume {resume}")
    folder = Path(resume)
    # core.checkpoint (which imports torch) verifies the folder before loading it; here only its shape is
    # checked: a step-NNNNNN folder holds a manifest.json
    if not folder.is_dir():
        raise ForethoughtError(f"--resume: no checkpoint folder at {folder} (give 'auto' or a <run>/step-NNNNNN "
                               "folder)")
    if not (folder / "manifest.json").is_file():
        raise ForethoughtError(f"--resume: {folder} is not a checkpoint (no manifest.json in it); give 'auto' or a "
                               "<run>/step-NNNNNN folder")
    return resume


def _configured(argv: list[str]) -> tuple[Command, Any, str | None]:
    """The command ``argv`` names, its loaded, checked config and its checked --resume (no torch, nothing
    written)."""
    cmd = _find(argv)
    rest = argv[2:] if cmd.verb else argv[1:]
    if cmd.spec_arg and rest and not rest[0].startswith("-"):
        rest = ["--spec", *rest]
    parser = _parser(cmd)
    args, overrides = parser.parse_known_args(rest)
    if not cmd.resume and any(a == "--resume" or a.startswith("--resume=") for a in overrides):
        name = f"{cmd.system} {cmd.verb}".strip()
        raise ForethoughtError(f"'{name}' takes no --resume (it has no checkpoints to continue from)")
    cfg = load_config(cmd.config_class(), resolve_config_path(cmd.system, cmd.verb or "demo", args.config),
                      overrides)
    return cmd, cfg, check_resume(cmd, getattr(args, "resume", None))


def check_command(argv: tuple[str, ...]) -> None:
    """Check a forethought command (without the program name) as the CLI would before running it: the command
    exists and its config loads; nothing runs. An experiment's spec cannot run experiments."""
    if argv and argv[0] in ("experiment", "demo"):
        raise ForethoughtError(f"'{argv[0]}' cannot run inside an experiment")
    _configured(list(argv))


def _find(argv: list[str]) -> Command:
    for c in COMMANDS:
        if argv[0] == c.system and (not c.verb or (len(argv) > 1 and argv[1] == c.verb)):
            return c
    systems = sorted({c.system for c in COMMANDS})
    if argv[0] in systems:
        verbs = [c.verb for c in COMMANDS if c.system == argv[0]]
        got = argv[1] if len(argv) > 1 else "(none)"
        if got in ("-h", "--help"):
            print(_top_help())
            raise SystemExit(0)
        raise ForethoughtError(f"unknown command '{argv[0]} {got}'; '{argv[0]}' has: {', '.join(verbs)}")
    raise ForethoughtError(f"unknown command '{argv[0]}'; commands: "
                           + ", ".join((c.system + " " + c.verb).strip() for c in COMMANDS))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
