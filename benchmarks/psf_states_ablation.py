"""Benchmark: what makes PSF's decoder rely on its states, on the planted corpus (issue 14, section 3).

Every arm is ``forethought psf recipe --config planted`` (configs/psf/recipe_planted.yaml) set back to the
ablation's reference (``REFERENCE``: the preset before the two changes the ablation kept, i.e. with its codes
stage and 1000 prior steps) and then ONE change, the same seed and the same model-stage budget; ``final`` is the
preset as shipped. Each is followed by ``forethought psf diagnose --all_stages true`` on its run
folder. Measured per arm (from the run's results.json and diagnose.json):

- the state-shuffle cost (teacher-forced CE with other documents' states minus with the document's own, nats per
  token, 95 % paired bootstrap interval over 256 validation documents) on the first token of every block, the
  other tokens and all tokens, for every model stage (codes kept = posterior mean, zeroed, shuffled along);
- the final stage's validation CE minus the true generator's exact NLL of the same validation windows (the
  floor of those windows; the corpus's entropy rate is 2.661);
- the AR baseline's block-cut ceiling (only the ``preset`` arm trains the AR baseline and the prior: the other
  arms change nothing the AR model sees, so they run with ``--prior.enabled false --baselines []`` and the
  ceiling is the preset's), and decoding from clean states (exact NLL, topic agreement).

An arm starts from a copy of the preset's finished folders for the stages it does not change (ARMS: e.g. free
bits change only the codes stage; the same seed and settings would retrain the earlier stages bit-identically
on the CPU, so the copy only saves the time) and trains the rest.

Everything is resumable: a finished recipe is skipped by ``--resume auto``, and an arm whose diagnose.json is
newer than its results.json is not diagnosed again. One arm at a time, one thread (``--threads``).

    python benchmarks/psf_states_ablation.py [--arms preset codes_off ...] [--collect-only]
        [--runs runs/bench-psf-states] [--out benchmarks/results/psf_states_ablation.json]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import forethought.psf.arms as psf_arms  # noqa: E402
from forethought.experiments import subprocess_env  # noqa: E402
from forethought.psf.config import MODEL_STAGES  # noqa: E402

PRESET = "planted"
LEAN = ["--prior.enabled", "false", "--baselines", "[]"]  # arms that leave the prior and the AR model unchanged

# The reference of the ablation: the preset as it was before the two changes this ablation kept (it had a codes
# stage and 1000 prior steps; the shipped preset has neither). Every arm but "final" is the reference + one change.
REFERENCE = ["--codes.enabled", "true", "--prior.train.steps", "1000"]

# name -> (what changes, recipe overrides after REFERENCE, the reference's stage folders the arm starts from). A
# stage whose settings an arm does not change trains exactly as in the reference (same seed, same batches;
# bit-identical on the CPU), so the arm copies the reference's finished folder for it instead of training it again.
BEFORE_CODES = ("base", "landing", "self_realized")
ARMS: dict[str, tuple[str, list[str], tuple[str, ...]]] = {
    "preset": ("the reference (+ prior + AR baseline)", [], ()),
    "state_norm_none": ("no state normalisation (the plain form before issue 14's fix)",
                        ["--model.state_norm", "none", *LEAN], ()),
    "codes_off": ("no codes stage (the final model is self_realized)", ["--codes.enabled", "false", *LEAN],
                  BEFORE_CODES),
    "free_bits_0.1": ("codes with free bits 0.1 nats/token instead of 1", ["--model.free_bits", "0.1", *LEAN],
                      BEFORE_CODES),
    "free_bits_0": ("codes with no free bits (the whole KL charged)", ["--model.free_bits", "0", *LEAN],
                    BEFORE_CODES),
    "code_in_normal": ("the codes stage's code input started at normal(0, 0.02) instead of zero (the saddle "
                       "model.code_in_init breaks)", ["--model.code_in_init", "normal", "--baselines", "[]"],
                       BEFORE_CODES),
    "input_dropout_0.1": ("10 % of the decoder's input tokens replaced by a mask vector in training (every stage)",
                          ["--model.input_dropout", "0.1", *LEAN], ()),
    "input_dropout_0.3": ("30 % of the decoder's input tokens replaced by a mask vector in training (every stage)",
                          ["--model.input_dropout", "0.3", *LEAN], ()),
    "base_2x": ("twice the base steps (2400)", ["--base.train.steps", "2400", *LEAN], ()),
    "prior_3x": ("three times the prior steps (3000)", ["--prior.train.steps", "3000", "--baselines", "[]"],
                 MODEL_STAGES),
    "final": ("configs/psf/recipe_planted.yaml as shipped: no codes stage, 3000 prior steps (+ AR baseline)", [],
              BEFORE_CODES),
}


def arm_overrides(arm: str) -> list[str]:
    return ARMS[arm][1] if arm == "final" else [*REFERENCE, *ARMS[arm][1]]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = psf_arms.arm_parser(__doc__.split("\n\n")[0], ARMS, ROOT / "runs" / "bench-psf-states",
                   ROOT / "benchmarks" / "results" / "psf_states_ablation.json")
    return psf_arms.parse_arm_args(p, ARMS, argv)


def recipe_command(args: argparse.Namespace, arm: str) -> list[str]:
    return [sys.executable, "-m", "forethought.cli", "psf", "recipe", "--config", PRESET, "--run.out_dir",
            args.runs, "--run.name", arm, *arm_overrides(arm), "--resume", "auto"]


def diagnose_command(args: argparse.Namespace, arm: str) -> list[str]:
    return [sys.executable, "-m", "forethought.cli", "psf", "diagnose", "--recipe_run", str(Path(args.runs) / arm),
            "--all_stages", "true", "--device", "cpu"]


def arm_of(args: argparse.Namespace, arm: str) -> psf_arms.Arm:
    return psf_arms.Arm(Path(args.runs) / arm, recipe_command(args, arm), diagnose_command(args, arm))


def train_and_diagnose(args: argparse.Namespace, arm: str) -> None:
    run_dir = Path(args.runs) / arm
    reuse = ARMS[arm][2]
    if reuse and not (run_dir / reuse[0]).exists():
        source = Path(args.runs) / "preset"
        if not (source / "results.json").is_file():
            train_and_diagnose(args, "preset")
        run_dir.mkdir(parents=True, exist_ok=True)
        for s in reuse:
            shutil.copytree(source / s, run_dir / s)
    psf_arms.train_and_diagnose(arm_of(args, arm), Path(args.runs) / "logs", subprocess_env(args.threads), ROOT,
                                retrain_unrecorded=True)


# ---- collection ----------------------------------------------------------------------------------------------

def _cell(m: dict | None) -> dict | None:
    return None if m is None else {"diff": m["diff"], "interval": m["interval"]}


def collect_arm(args: argparse.Namespace, arm: str) -> dict | None:
    read = psf_arms.read_arm(arm_of(args, arm), Path(args.runs) / "logs")
    if read is None:
        return None
    res, diag, walls = read
    final = res["final_stage"]
    shuffle = {}
    for stage, r in diag["shuffle"].items():
        shuffle[stage] = {mode: {g: _cell(m[g]) for g in ("first", "rest", "all")} for mode, m in r["modes"].items()}
    headline_mode = "posterior_mean" if "posterior_mean" in shuffle[final] else "none"
    d = diag["decoding"]
    out = {
        "change": ARMS[arm][0],
        "command": psf_arms.command_line(recipe_command(args, arm), ROOT),
        "diagnose_command": psf_arms.command_line(diagnose_command(args, arm), ROOT),
        "stages_copied_from_preset": list(ARMS[arm][2]),
        "final_stage": final,
        "val_ce": res["stages"][final]["val_ce"],
        "true_val_nll": res["true_val_nll"],
        "val_ce_minus_floor": res["stages"][final]["val_ce"] - res["true_val_nll"],
        "val_ce_per_stage": {s: r["val_ce"] for s, r in res["stages"].items() if "val_ce" in r and s != "ar"},
        "val_kl": res["stages"][final].get("val_kl"),
        "shuffle_headline_mode": headline_mode,
        "shuffle_first": shuffle[final][headline_mode]["first"]["diff"],
        "shuffle_rest": shuffle[final][headline_mode]["rest"]["diff"],
        "shuffle_all": shuffle[final][headline_mode]["all"]["diff"],
        "shuffle": shuffle,
        "ceiling": None if not diag["ceiling"]["available"] else
        {g: {"cut_minus_full": diag["ceiling"][g]["diff"], "interval": diag["ceiling"][g]["interval"],
             "full": diag["ceiling"][g]["full"]} for g in ("first", "rest", "all")},
        "ar_val_ce": res["stages"].get("ar", {}).get("val_ce"),
        "decoding": {src: (None if d[src].get("available") is False else
                           {k: d[src][k] for k in ("true_nll", "persistence", "block_coherence", "decoder_entropy")
                            if k in d[src]}) for src in ("data", "clean", "prior", "mean")},
        "topic_agreement_clean": d["clean"].get("topic_agreement"),
        "train_wall_s": {s: r["train_wall_s"] for s, r in res["stages"].items()},
        "recipe_wall_s": res.get("wall_s"),
        "recipe_invocations_wall_s": walls.get("recipe_s"),
        "diagnose_wall_s": walls.get("diagnose_s"),
        "params": res["params"],
    }
    return out


def markdown(arms: dict[str, dict]) -> str:
    """The README's table: every arm's final model stage (and the reference's earlier stages), shuffle cost with
    codes kept, validation CE over the floor, and the exact NLL of documents decoded from clean states / prior
    samples (temperature 1)."""
    def shuffle(a: dict, stage: str, g: str) -> str:
        m = a["shuffle"][stage]
        c = (m.get("posterior_mean") or m["none"])[g]
        return f"{c['diff']:+.3f} [{c['interval'][0]:+.3f}, {c['interval'][1]:+.3f}]" if g == "first" \
            else f"{c['diff']:+.3f}"

    def nll(a: dict, src: str) -> str:
        d = a["decoding"][src]
        return "-" if d is None else f"{d['true_nll']['mean']:.3f} ± {d['true_nll']['se']:.3f}"

    lines = ["| arm | change | stage | shuffle cost, first token [95 %] | all tokens | val CE − floor | "
             "clean-state samples: exact NLL | topic agreement | prior samples: exact NLL |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, a in arms.items():
        stages = [a["final_stage"]]
        if name in ("preset", "state_norm_none"):  # what each stage does to the cost
            stages = [s for s in a["val_ce_per_stage"] if s in a["shuffle"]]
        for st in stages:
            last = st == a["final_stage"]
            agree = a["topic_agreement_clean"]
            agree = f"{agree['same_source']:.2f}" if last and agree else "-"
            lines.append(f"| {name} | {a['change'] if st == stages[0] else '〃'} | {st} | {shuffle(a, st, 'first')} | "
                         f"{shuffle(a, st, 'all')} | {a['val_ce_per_stage'][st] - a['true_val_nll']:+.3f} | "
                         f"{nll(a, 'clean') if last else '-'} | "
                         f"{agree} | "
                         f"{nll(a, 'prior') if last else '-'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    t0 = time.perf_counter()
    arms = psf_arms.run_arms([] if args.collect_only else args.arms, ARMS,
                             lambda a: train_and_diagnose(args, a), lambda a: collect_arm(args, a))
    from forethought.data.planted import PlantedConfig, build_generator, entropy_rate

    out = {
        "what": "issue 14 section 3: state-shuffle cost and validation CE on the planted corpus, one change at a time "
                "from configs/psf/recipe_planted.yaml",
        "floor_entropy_rate": entropy_rate(build_generator(PlantedConfig()))[0],
        "notes": {
            "shuffle": "teacher-forced CE with other documents' states (4 derangements) minus with the document's "
                       "own, nats/token, on 256 validation documents; headline = final stage, codes kept "
                       "(posterior mean) when the stage has codes",
            "val_ce_minus_floor": "final model stage's validation CE (256 windows, clean states) minus the true "
                                  "generator's exact NLL of the same windows",
            "walls": "train_wall_s per stage from the recipe's results; one thread each, while other single-"
                     "threaded jobs shared the machine's 2 cores",
            "copies": "stages_copied_from_preset: those stage folders (and so their train_wall_s) are the "
                      "reference's",
            "commands": "the arms other than final ran while the preset file still had the codes stage and 1000 "
                        "prior steps, so without the REFERENCE overrides; every arm's saved config.yaml equals what "
                        "its recorded command resolves to now (checked; runs made before model.input_dropout "
                        "and model.code_in_init existed lack those keys, whose defaults are 0 and zero)",
        },
        "machine": psf_arms.machine(args.threads),
        "ceiling_of_the_preset": arms.get("preset", {}).get("ceiling"),
        "arms": arms,
        "wall_s": time.perf_counter() - t0,
    }
    psf_arms.write_results(args.out, out)
    print(markdown(arms))
    return out


if __name__ == "__main__":
    main()
