"""Benchmark: PSF with realization codes on the planted corpus — the paper's main configuration (a prior over
states + codes) and its state-only configuration (the same code-trained decoder, a prior over the states, zero
codes), 3 training seeds, and a joint-prior ablation on the same decoders.

Per seed ``main-s<seed>``: ``forethought psf recipe --config planted_main --baselines []`` (both priors; the AR
baseline is psf_planted.json's), ``psf diagnose`` (zeroing cost, code information, decoding from clean states /
prior samples at temperature 1, exact judge) and ``psf eval`` (sweeps, NLL/token at the references' entropy).
``decoder_reference-s<seed>``: the same for the earlier preset (the codes stage 300 steps, the prior width 64 and 2
layers), the decoder both ablations start from. Per prior arm and seed ``prior_<arm>-s<seed>``: the reference
decoder (its base..codes stage folders copied; only the prior trains), the reference prior or one change to it,
``psf diagnose``. Per decoder arm and seed ``decoder_<arm>-s<seed>``: the reference run's stages before the codes
stage copied, the codes stage with one change, the main prior, ``psf diagnose`` with the main runs' sampling seed
(paired with ``decoder_reference-s<seed>``); an arm that extends another (``EXTENDS``) copies that arm's stages,
codes included, and retrains the prior only. Measures and comparisons come from
:mod:`forethought.experiments.psf_codes`; the file is ``benchmarks/results/psf_codes.json``.

Resumable: a finished recipe / diagnosis / evaluation is not run again, and every finished run's JSON files are
archived at once in ``benchmarks/results/runs/psf_codes/<run>/`` (a collection reads the archive only).

    python benchmarks/psf_codes.py [--seeds 0 1 2] [--arms mean steps_10k ...] [--decoder-arms ...] [--arm-seeds 0 1]
        [--stages-from 'runs/psf-codes/decoder_codes_3000_prior_wide-s{seed}' [--copy-prior]] [--collect-only]
        [-- recipe overrides]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

import forethought.psf.arms as psf_arms  # noqa: E402
from forethought.experiments import invocations, subprocess_env  # noqa: E402
from forethought.experiments.psf_codes import (  # noqa: E402
    DECODER_MEASURES,
    TARGETS,
    arm_summary,
    seed_record,
    summarize,
)
from forethought.psf.config import MODEL_STAGES  # noqa: E402

PRESET = "planted_main"
# psf_planted.py's sweep (the PSF models reach the references' entropy near temperature 0.5)
SWEEP = "[[1.2,1.0],[1.0,1.0],[0.8,0.9],[0.6,0.9],[0.5,0.9],[0.4,0.9],[0.3,0.9]]"
# The joint-prior ablation: every arm trains one prior over states + codes on the seed's code-trained decoder, the
# reference arm with the pilot's prior settings spelled out (so the ablation does not move when planted_main's
# prior does), every other arm with one change to it (the last override wins).
# The decoder both ablations start from is the earlier planted_main's (its codes stage 300 steps): the
# ``decoder_reference`` runs, archived as main-s<seed> until the preset changed. Its settings are spelled out so
# that neither ablation moves when the preset does.
PILOT_CODES = ["--codes.train.steps", "300"]
REFERENCE = [*PILOT_CODES, "--prior.model.code_data", "draw", "--prior.train.steps", "3000", "--prior.model.n_embd",
             "64", "--prior.model.n_layer", "2"]
ARMS: dict[str, tuple[str, list[str]]] = {
    "reference": ("the pilot's prior: codes as one posterior draw per block, 3,000 steps, width 64, 2 layers",
                  REFERENCE),
    "mean": ("codes: the posterior mean instead of a draw", [*REFERENCE, "--prior.model.code_data", "mean"]),
    "steps_10k": ("10,000 training steps instead of 3,000", [*REFERENCE, "--prior.train.steps", "10000"]),
    "steps_30k": ("30,000 training steps instead of 3,000", [*REFERENCE, "--prior.train.steps", "30000"]),
    "wide": ("width 128 and 4 layers instead of 64 and 2", [*REFERENCE, "--prior.model.n_embd", "128",
                                                           "--prior.model.n_layer", "4"]),
    # follow-ups with two changes (not one), after the single changes
    "mean_steps_10k": ("posterior means and 10,000 steps (two changes)",
                       [*REFERENCE, "--prior.model.code_data", "mean", "--prior.train.steps", "10000"]),
    "mean_steps_30k": ("posterior means and 30,000 steps (two changes)",
                       [*REFERENCE, "--prior.model.code_data", "mean", "--prior.train.steps", "30000"]),
    "mean_wide_30k": ("posterior means, 30,000 steps, width 128 and 4 layers (three changes; one from "
                      "mean_steps_30k)", [*REFERENCE, "--prior.model.code_data", "mean", "--prior.train.steps",
                                          "30000", "--prior.model.n_embd", "128", "--prior.model.n_layer", "4"]),
    # the presets' prior (means, 30,000 steps) trained longer: its flow loss was still falling at 30,000
    "mean_steps_100k": ("posterior means and 100,000 steps (two changes; one from mean_steps_30k)",
                        [*REFERENCE, "--prior.model.code_data", "mean", "--prior.train.steps", "100000"]),
}
# Decoder arms: one change to the reference decoder's codes stage (the earlier preset: 300 steps, the main prior
# width 64 and 2 layers); each retrains that stage from the reference run's self-realized stage, then the main prior,
# and samples with the main runs' seed, so it pairs with decoder_reference-s<seed> by seed. The reference arm is
# the earlier preset run whole (both priors, psf eval), as the main runs are.
DECODER_REFERENCE = [*PILOT_CODES, "--prior.model.n_embd", "64", "--prior.model.n_layer", "2"]
CODES_3000 = [*DECODER_REFERENCE, "--codes.train.steps", "3000"]
WIDE_PRIOR = ["--prior.model.n_embd", "128", "--prior.model.n_layer", "4"]
DECODER_ARMS: dict[str, tuple[str, list[str]]] = {
    "reference": ("the earlier planted_main: the codes stage 300 steps, the main prior width 64 and 2 layers "
                  "(posterior means, 30,000 steps)", DECODER_REFERENCE),
    "codes_steps_1200": ("the codes stage trains 1,200 steps instead of 300",
                         [*DECODER_REFERENCE, "--codes.train.steps", "1200"]),
    "codes_steps_3000": ("the codes stage trains 3,000 steps instead of 300", CODES_3000),
    "codes_3000_prior_100k": ("the codes stage at 3,000 steps and the prior at 100,000 steps (two changes; one "
                              "from codes_steps_3000)", [*CODES_3000, "--prior.train.steps", "100000"]),
    "codes_3000_prior_wide": ("the codes stage at 3,000 steps and the prior at width 128 and 4 layers (two changes; "
                              "one from codes_steps_3000; planted_main's settings now)", [*CODES_3000, *WIDE_PRIOR]),
}
# A decoder arm that extends another copies that arm's finished stages, codes included (the same settings and seed
# retrain them bit-identically on the CPU), so only its prior trains.
EXTENDS = {"codes_3000_prior_100k": "codes_steps_3000", "codes_3000_prior_wide": "codes_steps_3000"}
DECODER_STAGES = MODEL_STAGES[:-1]  # what a decoder arm copies: everything before the codes stage
ARCHIVED = ("results.json", "diagnose.json", "eval/results.json")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2], help="training seeds of the main runs")
    p.add_argument("--arms", nargs="*", default=[], help=f"prior arms to train and diagnose: {list(ARMS)}")
    p.add_argument("--decoder-arms", nargs="*", default=[], help=f"decoder arms to train and diagnose: "
                   f"{list(DECODER_ARMS)}")
    p.add_argument("--arm-seeds", type=int, nargs="*", default=[0, 1], help="seeds of the prior and decoder arms")
    p.add_argument("--stages-from", default="", help="a finished run folder per seed ('{seed}' in it) whose "
                   "base..codes stage folders a new main run copies (the same settings and seed retrain them "
                   "bit-identically on the CPU; recorded in the JSON)")
    p.add_argument("--copy-prior", action="store_true", help="with --stages-from: copy its finished main prior "
                   "too (only the state-only prior then trains); refused unless that run's settings are the main "
                   "run's")
    p.add_argument("--runs", default=str(ROOT / "runs" / "psf-codes"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "psf_codes.json"))
    p.add_argument("--archive", default=str(ROOT / "benchmarks" / "results" / "runs" / "psf_codes"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--collect-only", action="store_true")
    p.add_argument("overrides", nargs="*", help="extra recipe overrides for every run (after --)")
    args = p.parse_args(argv)
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown:
        p.error(f"unknown arm(s) {unknown}; choose from {list(ARMS)}")
    if args.copy_prior and not args.stages_from:
        p.error("--copy-prior copies from --stages-from: give both")
    unknown = [a for a in args.decoder_arms if a not in DECODER_ARMS]
    if unknown:
        p.error(f"unknown decoder arm(s) {unknown}; choose from {list(DECODER_ARMS)}")
    return args


def cli(*words: str) -> list[str]:
    return [sys.executable, "-m", "forethought.cli", *words]


def recipe(args: argparse.Namespace, name: str, seed: int, extra: list[str]) -> list[str]:
    return cli("psf", "recipe", "--config", PRESET, "--run.out_dir", args.runs, "--run.name", name, "--run.seed",
               str(seed), "--baselines", "[]", *extra, *args.overrides, "--resume", "auto")


# The prior arms sample with seed 0 and the main configuration was chosen on them (seeds 0 and 1), so the main
# runs sample with seed 1: their documents are not the ones the choice was made on.
MAIN_SAMPLE_SEED = "1"


def diagnose(run_dir: Path, seed: str = "0") -> list[str]:
    return cli("psf", "diagnose", "--recipe_run", str(run_dir), "--samples", "256", "--permutations", "2",
               "--n_boot", "1000", "--device", "cpu", "--seed", seed)


def evaluate(run_dir: Path) -> list[str]:
    return cli("psf", "eval", "--recipe_run", str(run_dir), "--sweep", SWEEP, "--cost", "false", "--samples", "256",
               "--references", "256", "--n_boot", "1000", "--device", "cpu", "--seed", MAIN_SAMPLE_SEED)


def main_arm(args: argparse.Namespace, seed: int, name: str = "main", extra: tuple[str, ...] = ()) -> psf_arms.Arm:
    """A run of the whole preset (both priors, then diagnose and eval): the main runs, and the reference decoder
    arm (the earlier preset, ``extra`` its settings)."""
    d = Path(args.runs) / f"{name}-s{seed}"
    return psf_arms.Arm(d, recipe(args, d.name, seed, list(extra)), diagnose(d, MAIN_SAMPLE_SEED))


def reference_arm(args: argparse.Namespace, seed: int) -> psf_arms.Arm:
    return main_arm(args, seed, "decoder_reference", tuple(DECODER_ARMS["reference"][1]))


def prior_arm(args: argparse.Namespace, arm: str, seed: int) -> psf_arms.Arm:
    d = Path(args.runs) / f"prior_{arm}-s{seed}"
    return psf_arms.Arm(d, recipe(args, d.name, seed, ["--prior.state_only_variant", "false", *ARMS[arm][1]]),
                        diagnose(d))


def decoder_arm(args: argparse.Namespace, arm: str, seed: int) -> psf_arms.Arm:
    if arm == "reference":
        return reference_arm(args, seed)
    d = Path(args.runs) / f"decoder_{arm}-s{seed}"
    return psf_arms.Arm(d, recipe(args, d.name, seed, ["--prior.state_only_variant", "false",
                                                      *DECODER_ARMS[arm][1]]), diagnose(d, MAIN_SAMPLE_SEED))


def same_settings(src: Path, dst: Path) -> None:
    """Refuse a main run whose copied prior was trained with other settings: the two runs' config.yaml may differ
    only in the run's name and folder and in whether a state-only prior trains too (the training seed counts)."""
    def settings(run: Path) -> dict:
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        for key in ("name", "out_dir"):
            cfg.get("run", {}).pop(key, None)
        cfg.get("prior", {}).pop("state_only_variant", None)
        return cfg
    if settings(src) != settings(dst):
        sys.exit(f"{dst} copied its prior from {src}, whose settings differ; delete {dst} and rerun without "
                 "--copy-prior")


def copy_stages(src: Path, dst: Path, stages: tuple[str, ...] = MODEL_STAGES) -> None:
    """A new run starts from ``src``'s finished ``stages`` (default all model stages: only the priors then
    train)."""
    if (dst / "results.json").is_file() or (dst / stages[-1]).exists():
        return
    if not (src / stages[-1] / "results.json").is_file():
        sys.exit(f"{src} has no finished {stages[-1]} stage to copy")
    dst.mkdir(parents=True, exist_ok=True)
    for s in stages:
        shutil.copytree(src / s, dst / s)
    (dst / "stages_from.txt").write_text(str(src) + "\n")


def archive(args: argparse.Namespace, arm: psf_arms.Arm, logs: Path, commands: list[list[str]]) -> None:
    """The finished run's JSON files, its commands and wall times into the archive folder."""
    out = Path(args.archive) / arm.run_dir.name
    out.mkdir(parents=True, exist_ok=True)
    for rel in ARCHIVED:
        if (arm.run_dir / rel).is_file():
            shutil.copyfile(arm.run_dir / rel, out / rel.replace("/", "_"))
    src = arm.run_dir / "stages_from.txt"
    meta = {"commands": [psf_arms.command_line(c, ROOT) for c in commands],
            "walls": psf_arms.read_walls(arm, logs),
            "stages_from": src.read_text().strip().replace(str(ROOT) + "/", "") if src.is_file() else None}
    (out / "run.json").write_text(json.dumps(meta, indent=1) + "\n")


def run_main(args: argparse.Namespace, arm: psf_arms.Arm, seed: int, logs: Path, env: dict,
             stages_from: str = "", copy_prior: bool = False) -> None:
    src = Path(stages_from.format(seed=seed)) if stages_from else None
    if src is not None and not (arm.run_dir / "results.json").is_file():
        copy_stages(src, arm.run_dir, (*MODEL_STAGES, "prior") if copy_prior else MODEL_STAGES)
    psf_arms.train_and_diagnose(arm, logs, env, ROOT)
    if copy_prior and src is not None:
        same_settings(src, arm.run_dir)
    ev = evaluate(arm.run_dir)
    if not (arm.run_dir / "eval" / "results.json").is_file():
        walls = psf_arms.read_walls(arm, logs)
        walls["eval_s"] = psf_arms.run_logged(ev, logs / f"{arm.run_dir.name}.log", env, ROOT)
        arm.walls_path(logs).write_text(json.dumps(walls))
    archive(args, arm, logs, [list(arm.recipe), list(arm.diagnose), ev])


def run_arm(args: argparse.Namespace, arm: psf_arms.Arm, seed: int, stages: tuple[str, ...], logs: Path,
            env: dict, source: Path | None = None) -> None:
    """A prior or decoder arm: ``stages`` copied from ``source`` (default the seed's reference decoder run,
    trained first if need be), the rest trained, diagnosed and archived."""
    if not (arm.run_dir / "results.json").is_file():
        if source is None:
            reference = reference_arm(args, seed)
            if not (reference.run_dir / "codes" / "results.json").is_file():
                run_main(args, reference, seed, logs, env)
            source = reference.run_dir
        copy_stages(source, arm.run_dir, stages)
    psf_arms.train_and_diagnose(arm, logs, env, ROOT)
    archive(args, arm, logs, [list(arm.recipe), list(arm.diagnose)])


def read_archived(args: argparse.Namespace, name: str) -> tuple[dict, dict, dict | None, dict] | None:
    d = Path(args.archive) / name
    if not (d / "diagnose.json").is_file():
        return None
    ev = d / "eval_results.json"
    return (json.loads((d / "results.json").read_text()), json.loads((d / "diagnose.json").read_text()),
            json.loads(ev.read_text()) if ev.is_file() else None, json.loads((d / "run.json").read_text()))


def collect(args: argparse.Namespace, command: str) -> dict:
    mains, runs = {}, {}
    for d in sorted(Path(args.archive).glob("*-s*")):
        read = read_archived(args, d.name)
        if read is None:
            continue
        res, diag, ev, meta = read
        arm, seed = d.name.rsplit("-s", 1)
        rec = {**seed_record(res, diag, ev), **meta, "arm": arm, "seed": int(seed)}
        runs[d.name] = rec
        if arm == "main":
            mains[int(seed)] = rec
    def by_seed(run_name: str) -> dict[int, dict]:
        return {r["seed"]: r for r in runs.values() if r["arm"] == run_name}

    per_arm = {name: by_seed(f"prior_{name}") for name in ARMS}  # the reference arm is summarised against itself
    arms = {name: {"change": what, "overrides": overrides, **arm_summary(per_arm[name], per_arm["reference"])}
            for name, (what, overrides) in ARMS.items() if per_arm[name]}
    decoders = {name: {"change": what, "overrides": overrides,
                       **arm_summary(per, by_seed("decoder_reference"), DECODER_MEASURES)}
                for name, (what, overrides) in DECODER_ARMS.items() if (per := by_seed(f"decoder_{name}"))}
    walls = sum(v for r in runs.values() for v in (r.get("walls") or {}).values())
    targets = {k: {"direction": d, "level": v, "what": w} for k, (d, v, w) in TARGETS.items()}
    return {"command": command, "what": __doc__.split("\n\n")[0], "machine": psf_arms.machine(args.threads),
            "wall_s": walls, "wall_s_note": "the recipe, diagnose and eval wall times of every run in the file, "
            "summed (each run one thread; runs archived without recorded times count nothing)", "targets": targets,
            "main": summarize(mains) if mains else None, "prior_arms": arms, "decoder_arms": decoders,
            "runs": runs}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    logs, env = Path(args.runs) / "logs", subprocess_env(args.threads)
    logs.mkdir(parents=True, exist_ok=True)
    if not args.collect_only:
        for seed in args.seeds:
            run_main(args, main_arm(args, seed), seed, logs, env, args.stages_from, args.copy_prior)
        for name in args.arms:  # arm-major: an unfinished ablation has every seed of its first arms
            for seed in args.arm_seeds:
                run_arm(args, prior_arm(args, name, seed), seed, MODEL_STAGES, logs, env)
        for name in args.decoder_arms:
            for seed in args.arm_seeds:
                if name in EXTENDS:  # the arm it extends first, then its stages copied
                    base = decoder_arm(args, EXTENDS[name], seed)
                    run_arm(args, base, seed, DECODER_STAGES, logs, env)
                    run_arm(args, decoder_arm(args, name, seed), seed, MODEL_STAGES, logs, env, base.run_dir)
                elif name == "reference":
                    run_main(args, reference_arm(args, seed), seed, logs, env)
                else:
                    run_arm(args, decoder_arm(args, name, seed), seed, DECODER_STAGES, logs, env)
    command = " ".join(["python", "benchmarks/psf_codes.py", *(sys.argv[1:] if argv is None else argv)])
    seen = invocations(Path(args.archive), command)  # every invocation, kept beside the archived runs
    out = collect(args, " ; ".join(seen))
    psf_arms.write_results(args.out, out)
    return out


if __name__ == "__main__":
    main()
