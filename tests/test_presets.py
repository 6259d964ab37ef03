"""Every shipped preset loads with its command's config class (every section validated), and the paper presets name
the precision, accumulation and checkpointing that fit them on one 80 GB GPU (benchmarks/preset_memory.py)."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from forethought.cli import COMMANDS, CONFIG_DIR, _load
from forethought.core.config import load_config
from forethought.core.trainer import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
PRESETS = [(cmd, path) for cmd in COMMANDS if cmd.verb
           for path in sorted((CONFIG_DIR / cmd.system).glob(f"{cmd.verb}_*.yaml"))]
PAPER = ["predgen/train_paper.yaml", "psf/recipe_paper.yaml", "myopia/lm_paper.yaml", "myopia/synthetic_paper.yaml"]


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


def test_paper_presets_fit_one_80gb_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/preset_memory.py (the README's table): each paper preset, as configured, within 72 GiB."""
    spec = importlib.util.spec_from_file_location("preset_memory", ROOT / "benchmarks" / "preset_memory.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "preset_memory", mod)  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    res = mod.main(["--out", str(tmp_path / "m.json")])
    assert {r["preset"] for r in res["rows"]} == {n.removesuffix(".yaml") for n in PAPER}
    for r in res["rows"]:
        assert r["as_configured"]["fits_80gb"], (r["preset"], r["part"], r["as_configured"]["total_bytes"] / 2**30)
        assert r["estimate"]["trainable_parameters"] > 0
    # the 7B preset would not fit without checkpointing: the setting is needed, not decoration
    predgen = next(r for r in res["rows"] if r["preset"] == "predgen/train_paper")
    assert not predgen["plain"]["fits_80gb"]
