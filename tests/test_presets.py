"""Every shipped preset loads with its command's config class (every section validated), and the paper presets name
the precision, accumulation and checkpointing that fit them on one 80 GB GPU (`forethought presets memory`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_harness import expect_clean_failure

from forethought.cli import COMMANDS, CONFIG_DIR, _load, main
from forethought.core.config import load_config
from forethought.core.trainer import TrainConfig
from forethought.experiments.scaling import memory
from forethought.predgen.config import PredGenConfig

PRESETS = [(cmd, path) for cmd in COMMANDS if cmd.verb
           for path in sorted((CONFIG_DIR / cmd.system).glob(f"{cmd.verb}_*.yaml"))]
PREDGEN_PAPER = sorted(p.stem.removeprefix("train_paper_") for p in (CONFIG_DIR / "predgen").glob("train_paper_*.yaml"))
PAPER = [*(f"predgen/train_paper_{t}.yaml" for t in PREDGEN_PAPER), "psf/recipe_paper.yaml", "myopia/lm_paper.yaml",
         "myopia/synthetic_paper.yaml"]


def test_every_preset_file_belongs_to_a_command() -> None:
    systems = {cmd.system for cmd in COMMANDS if cmd.verb}
    files = {p for s in systems for p in (CONFIG_DIR / s).glob("*.yaml")}
    assert files == {p for _, p in PRESETS}


@pytest.mark.parametrize("cmd,path", PRESETS, ids=[f"{c.system}/{p.name}" for c, p in PRESETS])
def test_preset_loads(cmd: Any, path: Path) -> None:
    load_config(_load(cmd.config), path)


def _train_sections(cfg: Any, prefix: str = "") -> dict[str, TrainConfig]:
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if isinstance(v, TrainConfig):
            out[prefix + f.name] = v
        elif dataclasses.is_dataclass(v):
            out.update(_train_sections(v, f"{prefix}{f.name}."))
    return out


@pytest.mark.parametrize("name", PAPER)
def test_paper_presets_name_precision_accumulation_and_checkpointing(name: str) -> None:
    """Written in the file, not left to the defaults: run.precision, and grad_accum and activation_checkpointing
    in every train section the command reads."""
    path = CONFIG_DIR / name
    raw = yaml.safe_load(path.read_text())
    assert "precision" in raw["run"]
    cmd = next(c for c, p in PRESETS if p == path)
    cfg = load_config(_load(cmd.config), path)
    for key in _train_sections(cfg):
        node = raw
        for part in key.split("."):
            node = node[part]
        assert {"grad_accum", "activation_checkpointing"} <= node.keys(), (name, key)


def test_paper_presets_fit_one_80gb_gpu(tmp_path: Path) -> None:
    """`forethought presets memory` (the scaling guide's table): each paper preset, as configured, within 72 GiB."""
    assert main(["presets", "memory", "--run.out_dir", str(tmp_path), "--run.name", "m"]) == 0
    res = json.loads((tmp_path / "m" / "results.json").read_text())
    assert {r["preset"] for r in res["rows"]} == {"predgen/train_paper_<task>", "psf/recipe_paper", "myopia/lm_paper",
                                                   "myopia/synthetic_paper"}
    assert res["fits_if_total_at_most_gib"] == pytest.approx(72)
    for r in res["rows"]:
        assert r["as_configured"]["fits"], (r["preset"], r["part"], r["as_configured"]["total_bytes"] / 2**30)
        assert r["estimate"]["trainable_parameters"] > 0
    assert res["all_fit"] and res["largest_total_gib"] <= 72
    # every PredGen paper preset is estimated, in exactly one row (the tasks that share a setting share a row)
    predgen = [r for r in res["rows"] if r["preset"] == "predgen/train_paper_<task>"]
    named = {t: r for r in predgen for t in r["part"].split(":")[0].split(", ")}
    assert sorted(named) == PREDGEN_PAPER and len(PREDGEN_PAPER) == 14 and len(predgen) < 14
    for task, r in named.items():
        t = load_config(PredGenConfig, CONFIG_DIR / "predgen" / f"train_paper_{task}.yaml").train
        assert (r["batch_size"], r["as_configured"]["micro_batch"]) == (t.batch_size, t.batch_size // t.grad_accum)
    # PSF's stages would not fit without checkpointing: the setting is needed, not decoration
    psf = max((r for r in res["rows"] if r["preset"] == "psf/recipe_paper"), key=lambda r: r["plain"]["total_bytes"])
    assert not psf["plain"]["fits"] and psf["as_configured"]["activation_checkpointing"]
    assert res["per_preset"]["psf/recipe_paper"]["largest_plain_gib"] > 72
    # the spec's derived table: a row per preset and model or stage, sizes as the guide prints them
    table = memory({"paper-presets-s0": {"results": res}}, {})["memory of each model or stage"]
    assert sum(len(parts) for parts in table.values()) == len(res["rows"])
    cells = table["psf/recipe_paper"][psf["part"]]
    assert cells["total (GiB)"] == f"{psf['as_configured']['total_bytes'] / 2**30:.1f}"
    assert cells["fits"] == "yes" and cells["without accumulation or checkpointing (GiB)"].endswith("(does not fit)")


@pytest.mark.parametrize("args,names", [(["--usable", "1.5"], ["usable"]), (["--card_gib", "0"], ["card_gib"])])
def test_memory_bad_setting_one_line(tmp_path: Path, args: list[str], names: list[str]) -> None:
    runs = tmp_path / "runs"
    expect_clean_failure(["presets", "memory", "--run.out_dir", str(runs), *args], tmp_path, runs, names,
                         in_process=True)
    assert not runs.exists()
