"""Pilot of the code-channel ablation on the planted corpus: which single option makes the decoder use its
realization codes (zeroing them costs >= 0.1 nats/token)?

Every arm is ``forethought psf recipe --config planted`` with the codes stage on for ``--codes-steps`` steps, no
prior and no AR baseline (nothing here reads them), then ``forethought psf diagnose`` on its run folder, whose
``codes`` section gives the measures (src/forethought/psf/diagnose.py, :func:`code_diagnostics`):

- the zeroing cost: teacher-forced CE with zero codes minus with the posterior-mean codes, clean states, nats per
  token, 95 % paired bootstrap interval over 256 validation documents;
- the KL (nats/token) and the part of it that is the mean code (no information), active units;
- held-out topic probes: I(code; topic | state) from posterior draws (what passes the channel) and I(code; topic)
  from the posterior means;
- documents decoded from clean states with posterior-mean codes vs zero codes: topic agreement with the source
  document and topic persistence (exact, the planted corpus's true posteriors).

Arms (REFERENCE + one change each; ``saddle`` is the shipped default, whose zero code head and zero code input
get no gradient but the noise's, so every option below starts from ``--model.code_in_init normal``): see ARMS.
Every arm copies the finished base / landing / self_realized folders of the first arm of its seed that finished
(``donor-s<seed>``; the same seed and settings retrain them bit-identically on the CPU, so the copy only saves
time) and trains its codes stage.

One arm at a time, one thread; resumable (a finished recipe is skipped by ``--resume auto``, a diagnosed arm is
not diagnosed again).

    python benchmarks/psf_codes_pilot.py [--arms reference sigma_0.1 ...] [--seed 0] [--codes-steps 300]
        [--runs runs/psf-codes-pilot] [--out benchmarks/results/psf_codes_pilot.json] [--collect-only]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import forethought.psf.arms as psf_arms  # noqa: E402
from forethought.experiments import subprocess_env  # noqa: E402

PRESET = "planted"
BEFORE_CODES = ("base", "landing", "self_realized")
LEAN = ["--codes.enabled", "true", "--prior.enabled", "false", "--baselines", "[]"]
REFERENCE = ["--model.code_in_init", "normal"]  # breaks the zero-zero saddle; every option arm keeps it

# name -> (what changes, overrides after LEAN (REFERENCE included where it applies))
ARMS: dict[str, tuple[str, list[str]]] = {
    "saddle": ("the shipped default: code head and code input both start at zero", []),
    "reference": ("code input started at normal(0, 0.02)", REFERENCE),
    "sigma_0.1": ("+ posterior started at sigma 0.1", [*REFERENCE, "--model.code_init_sigma", "0.1"]),
    "warmup_100": ("+ posterior mean only for the first 100 codes steps",
                   [*REFERENCE, "--model.code_warmup_steps", "100"]),
    "inputs": ("+ the code enters every input position of its branch", [*REFERENCE, "--model.code_enters", "inputs"]),
    "lr_x10": ("+ code layers at 10x the learning rate", [*REFERENCE, "--model.code_lr_factor", "10"]),
    "bn_vae": ("+ BN-VAE mean normalisation (gamma 0.5)", [*REFERENCE, "--model.code_mean_norm", "batch"]),
    "free_bits_block_2": ("+ free bits 2 nats per block (about log 8 topics) instead of 1 nat/token",
                          [*REFERENCE, "--model.free_bits_block", "2.0"]),
    # a follow-up with two changes (not one): BN-VAE with its KL budget sized to a block's plan
    "bn_vae_fb2": ("+ BN-VAE + free bits 2 nats per block (two changes)",
                   [*REFERENCE, "--model.code_mean_norm", "batch", "--model.free_bits_block", "2.0"]),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = psf_arms.arm_parser(__doc__.split("\n\n")[0], ARMS, ROOT / "runs" / "psf-codes-pilot",
                   ROOT / "benchmarks" / "results" / "psf_codes_pilot.json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--codes-steps", type=int, default=300)
    return psf_arms.parse_arm_args(p, ARMS, argv)


def arm_dir(args: argparse.Namespace, arm: str) -> Path:
    return Path(args.runs) / f"{arm}-s{args.seed}"


def recipe_command(args: argparse.Namespace, arm: str) -> list[str]:
    return [sys.executable, "-m", "forethought.cli", "psf", "recipe", "--config", PRESET, "--run.out_dir", args.runs,
            "--run.name", arm_dir(args, arm).name, "--run.seed", str(args.seed), "--codes.train.steps",
            str(args.codes_steps), *LEAN, *ARMS[arm][1], "--resume", "auto"]


def diagnose_command(args: argparse.Namespace, arm: str) -> list[str]:
    return [sys.executable, "-m", "forethought.cli", "psf", "diagnose", "--recipe_run", str(arm_dir(args, arm)),
            "--samples", "128", "--permutations", "2", "--n_boot", "1000", "--device", "cpu"]


def arm_of(args: argparse.Namespace, arm: str) -> psf_arms.Arm:
    return psf_arms.Arm(arm_dir(args, arm), recipe_command(args, arm), diagnose_command(args, arm))


def add_code_buffers(run_dir: Path, arm: str, args: argparse.Namespace) -> None:
    """BN-VAE creates its buffers and shift only when on, so the copied stage checkpoints (written without them)
    are rewritten with them at their initial values (each stage's own weights unchanged): ``--resume auto``
    loads every finished stage strictly."""
    from forethought.core.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
    from forethought.psf.generate import build_psf, read_run_results, read_saved_config

    if "--model.code_mean_norm" not in ARMS[arm][1]:
        return
    donor = Path(args.runs) / f"donor-s{args.seed}"
    cfg = read_saved_config(donor)
    cfg.model.code_mean_norm = "batch"
    vocab = read_run_results(donor)["vocab_size"]
    for stage in BEFORE_CODES:
        ckpt = latest_checkpoint(donor / stage)
        model = build_psf(cfg.model, vocab, cfg.seed)
        state = load_checkpoint(ckpt, model, strict=False)
        target = run_dir / stage
        for old in target.glob("step-*"):
            shutil.rmtree(old)
        step = int(ckpt.name.split("-")[1])
        save_checkpoint(target, step, model, state or {"step": step})
        assert latest_checkpoint(target).name == ckpt.name


def train_and_diagnose(args: argparse.Namespace, arm: str) -> None:
    run_dir = arm_dir(args, arm)
    donor = Path(args.runs) / f"donor-s{args.seed}"
    if not (run_dir / "results.json").is_file() and not (run_dir / "self_realized").exists():
        if (donor / "self_realized" / "results.json").is_file():  # a finished prefix of the same seed
            run_dir.mkdir(parents=True, exist_ok=True)
            for s in BEFORE_CODES:
                shutil.copytree(donor / s, run_dir / s)
            add_code_buffers(run_dir, arm, args)
    psf_arms.train_and_diagnose(arm_of(args, arm), Path(args.runs) / "logs", subprocess_env(args.threads), ROOT)
    if not donor.exists() and "--model.code_mean_norm" not in ARMS[arm][1]:
        donor.symlink_to(run_dir.name)  # the first finished arm lends its earlier stages to the others


def collect_arm(args: argparse.Namespace, arm: str) -> dict | None:
    read = psf_arms.read_arm(arm_of(args, arm), Path(args.runs) / "logs")
    if read is None:
        return None
    res, diag, walls = read
    c, d = diag["codes"], diag["decoding"]
    z, u, t = c["zeroing_cost"], c["usage"], c["topics"]

    def agree(src: str) -> float | None:
        return d[src]["topic_agreement"]["same_source"] if src in d else None

    return {
        "change": ARMS[arm][0],
        "command": psf_arms.command_line(recipe_command(args, arm), ROOT),
        "diagnose_command": psf_arms.command_line(diagnose_command(args, arm), ROOT),
        "seed": args.seed,
        "codes_val_ce": res["stages"]["codes"]["val_ce"],
        "self_realized_val_ce": res["stages"]["self_realized"]["val_ce"],
        "true_val_nll": res["true_val_nll"],
        "codes_val_kl": res["stages"]["codes"].get("val_kl"),
        "zeroing_cost": {g: None if z[g] is None else {"diff": z[g]["diff"], "interval": z[g]["interval"]}
                         for g in ("first", "rest", "all")},
        "zeroing_cost_per_position": z["diff_per_position"],
        "kl_per_token": u["kl_per_token"], "kl_parts_per_token": u["kl_parts_per_token"],
        "active_units": u["active_units"], "dims": u["dims"],
        "topics": {k: t.get(k) for k in ("information_code", "information_code_given_state", "information_code_mean",
                                         "information_code_mean_given_state", "information_state", "accuracy",
                                         "label_entropy")},
        "clean_topic_agreement": agree("clean"), "clean_zero_codes_topic_agreement": agree("clean_zero_codes"),
        "clean_persistence": d["clean"]["persistence"]["mean"],
        "clean_zero_codes_persistence": d["clean_zero_codes"]["persistence"]["mean"],
        "clean_true_nll": d["clean"]["true_nll"]["mean"],
        "data_persistence": d["data"]["persistence"]["mean"],
        "codes_train_wall_s": res["stages"]["codes"]["train_wall_s"],
        "recipe_invocations_wall_s": walls.get("recipe_s"), "diagnose_wall_s": walls.get("diagnose_s"),
    }


def markdown(arms: dict[str, dict]) -> str:
    lines = ["| arm | change | zeroing cost, all tokens [95 %] | first token | KL nats/token (mean-code part) | "
             "active units | I(code; topic | state), draws | I(code; topic), means | topic agreement, codes / zero "
             "| persistence, codes / zero | codes val CE |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, a in arms.items():
        z = a["zeroing_cost"]["all"]
        f = a["zeroing_cost"]["first"]
        t = a["topics"]
        lines.append(
            f"| {name} | {a['change']} | {z['diff']:+.3f} [{z['interval'][0]:+.3f}, {z['interval'][1]:+.3f}] | "
            f"{f['diff']:+.3f} | {a['kl_per_token']:.3f} ({a['kl_parts_per_token']['mean_shift']:.3f}) | "
            f"{a['active_units']}/{a['dims']} | {t['information_code_given_state']:.3f} | "
            f"{t['information_code_mean']:.3f} | {a['clean_topic_agreement']:.3f} / "
            f"{a['clean_zero_codes_topic_agreement']:.3f} | {a['clean_persistence']:.3f} / "
            f"{a['clean_zero_codes_persistence']:.3f} | {a['codes_val_ce']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    t0 = time.perf_counter()
    arms = psf_arms.run_arms([] if args.collect_only else args.arms, ARMS,
                             lambda a: train_and_diagnose(args, a), lambda a: collect_arm(args, a))
    out = {
        "command": " ".join(["python", "benchmarks/psf_codes_pilot.py", *sys.argv[1:]]),
        "what": "code-channel pilot: which single code-channel option makes zeroing the codes cost >= 0.1 nats/token, "
                "planted corpus, one seed",
        "target": "zeroing cost >= 0.1 nats/token (all tokens)",
        "notes": {
            "zeroing_cost": "teacher-forced CE with zero codes minus with posterior-mean codes, clean states, "
                            "256 validation documents, paired bootstrap over documents",
            "topics": "held-out multinomial probes (first 128 documents fit, last 128 score; L2 by 2-fold CV) on "
                      "the exact topic posteriors; information in nats",
            "decoding": "128 documents decoded at temperature 1 from clean states with posterior-mean codes or zero "
                        "codes; agreement = same most likely topic as the source block",
            "copies": "arms after the first copy its base/landing/self_realized folders (donor)",
        },
        "machine": psf_arms.machine(args.threads),
        "codes_steps": args.codes_steps,
        "arms": arms,
        "wall_s": time.perf_counter() - t0,
    }
    if args.collect_only and Path(args.out).is_file():  # a re-collection: the commands and time that trained the arms stay
        prev = json.loads(Path(args.out).read_text())
        out["command"] = " ; ".join(c for c in (prev.get("command"), out["command"]) if c)
        out["wall_s"] = prev.get("wall_s", out["wall_s"])
    psf_arms.write_results(args.out, out)
    print(markdown(arms))
    return out


if __name__ == "__main__":
    main()
