"""benchmarks/psf_codes_pilot.py: every arm's recipe command loads as a valid config, differs from the
reference by its one change, and the table renders from a collected arm."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from forethought.cli import CONFIG_DIR
from forethought.core.config import load_config
from forethought.psf.recipe import RecipeConfig

ROOT = Path(__file__).resolve().parents[1]


def pilot():
    spec = importlib.util.spec_from_file_location("psf_codes_pilot", ROOT / "benchmarks" / "psf_codes_pilot.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def overrides(argv: list[str]) -> list[str]:
    """``--key value`` pairs of a recipe command after its --config, as ``key=value``, without --resume."""
    rest = argv[argv.index("--config") + 2:]
    pairs = [(rest[i][2:], rest[i + 1]) for i in range(0, len(rest), 2)]
    return [f"{k}={v}" for k, v in pairs if k != "resume"]


def test_every_arm_is_one_valid_change_from_the_reference(tmp_path):
    mod = pilot()
    args = mod.parse_args(["--runs", str(tmp_path)])
    reference = load_config(RecipeConfig, CONFIG_DIR / "psf" / "recipe_planted.yaml",
                            overrides(mod.recipe_command(args, "reference")))
    reference.validate()
    assert reference.codes.enabled and reference.model.code_in_init == "normal" and not reference.prior.enabled
    for arm in mod.ARMS:
        cfg = load_config(RecipeConfig, CONFIG_DIR / "psf" / "recipe_planted.yaml",
                          overrides(mod.recipe_command(args, arm)))
        cfg.validate()
        changed = {k for k, v in vars(cfg.model).items() if v != getattr(reference.model, k)}
        assert len(changed) == (0 if arm == "reference" else 2 if arm == "bn_vae_fb2" else 1), (arm, changed)
        assert cfg.codes.train.steps == 300 and cfg.run.seed == 0
