"""``benchmarks/psf_codes.py``'s own logic without training: the ablations spell out the decoder they start from
(so they do not move when planted_main does), a main run that copies an arm's prior is refused unless the two
runs' settings match, and unknown arms fail in one line."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def bench(monkeypatch: pytest.MonkeyPatch):
    spec = importlib.util.spec_from_file_location("psf_codes_bench", ROOT / "benchmarks" / "psf_codes.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def _last(overrides: list[str], key: str) -> str | None:
    """The value the recipe's parser keeps for ``key``: the last one given."""
    values = [overrides[i + 1] for i, k in enumerate(overrides[:-1]) if k == key]
    return values[-1] if values else None


def test_ablations_fix_the_reference_decoder(bench) -> None:
    preset = yaml.safe_load((ROOT / "src/forethought/configs/psf/recipe_planted_main.yaml").read_text())
    # every arm names its codes stage's length and its prior's size, whatever the preset says
    for name, (_, overrides) in {**bench.ARMS, **bench.DECODER_ARMS}.items():
        assert _last(overrides, "--codes.train.steps") is not None, name
        assert _last(overrides, "--prior.model.n_embd") is not None, name
    ref = bench.DECODER_ARMS["reference"][1]
    assert _last(ref, "--codes.train.steps") == "300" and _last(ref, "--prior.model.n_embd") == "64"
    # the arm the preset was taken from has the preset's settings: its runs and the main runs agree
    wide = bench.DECODER_ARMS["codes_3000_prior_wide"][1]
    assert int(_last(wide, "--codes.train.steps")) == preset["codes"]["train"]["steps"]
    assert int(_last(wide, "--prior.model.n_embd")) == preset["prior"]["model"]["n_embd"]
    assert int(_last(wide, "--prior.model.n_layer")) == preset["prior"]["model"]["n_layer"]
    assert set(bench.EXTENDS.values()) <= set(bench.DECODER_ARMS)


def test_a_copied_prior_needs_the_same_settings(bench, tmp_path: Path) -> None:
    cfg = {"run": {"name": "a", "seed": 0}, "codes": {"train": {"steps": 3000}},
           "prior": {"state_only_variant": False, "model": {"n_embd": 128}}}
    src, dst = tmp_path / "src", tmp_path / "dst"
    for d, name, variant in ((src, "a", False), (dst, "b", True)):
        d.mkdir()
        c = {**cfg, "run": {"name": name, "seed": 0}, "prior": {**cfg["prior"], "state_only_variant": variant}}
        (d / "config.yaml").write_text(yaml.safe_dump(c))
    bench.same_settings(src, dst)  # names and the state-only variant may differ
    c = yaml.safe_load((dst / "config.yaml").read_text())
    (dst / "config.yaml").write_text(yaml.safe_dump({**c, "run": {"name": "b", "seed": 1}}))
    with pytest.raises(SystemExit, match="settings differ"):  # another training seed: other weights
        bench.same_settings(src, dst)
    c["prior"]["model"]["n_embd"] = 64
    (dst / "config.yaml").write_text(yaml.safe_dump(c))
    with pytest.raises(SystemExit, match="settings differ"):
        bench.same_settings(src, dst)


def test_unknown_decoder_arm_is_refused(bench, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        bench.parse_args(["--decoder-arms", "nope"])
    assert e.value.code == 2 and "unknown decoder arm" in capsys.readouterr().err


def test_copy_prior_needs_stages_from(bench, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        bench.parse_args(["--copy-prior"])
    assert e.value.code == 2 and "--stages-from" in capsys.readouterr().err
