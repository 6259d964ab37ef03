"""The PSF ablation specs (psf_codes, psf_codes_pilot, psf_states_ablation) and psf_prompted: each loads and its
commands parse; collecting psf_codes from a copy of its committed archive reproduces the numbers of the JSON the old
benchmark script wrote (``benchmarks/results/legacy/psf_codes.json``, read from that file); ``psf recipe --stages_from``
copies a matching prior too (what the old script's ``--copy-prior`` did, now the one implementation)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from forethought import cli
from forethought.cli import check_command
from forethought.core.checkpoint import latest_checkpoint
from forethought.experiments.runner import Layout, collect
from forethought.experiments.spec import load_spec, plan

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SPECS = ("psf_codes", "psf_codes_pilot", "psf_states_ablation", "psf_prompted", "psf_code_dropout", "psf_trade",
         "psf_planted_ceiling", "psf_token_flow_latents")


@pytest.mark.parametrize("name", SPECS)
def test_spec_loads_and_its_commands_parse(name: str) -> None:
    spec, _ = load_spec(name)
    assert spec.system == "psf" and spec.description and spec.cost
    planned = plan(spec)
    for p in planned:
        for argv in p.steps:
            check_command(argv)
    archive = RESULTS / "runs" / name
    if archive.is_dir():  # every archived record is a planned run
        assert {f.stem for f in archive.glob("*.json")} <= {p.run for p in planned}


def test_a_run_copies_its_source_before_it_needs_it() -> None:
    """A run whose recipe copies stages from another run of the spec (``--stages_from {out_dir}/<run>``) comes after
    that run in the plan: with ``parallel: 1`` every source has finished its recipe first."""
    for name in SPECS:
        spec, _ = load_spec(name)
        assert spec.parallel == 1
        order = [p.run for p in plan(spec, "OUT")]
        for i, p in enumerate(plan(spec, "OUT")):
            argv = p.steps[0]
            if "--stages_from" in argv:
                source = Path(argv[argv.index("--stages_from") + 1])
                assert source.parent == Path("OUT") and source.name in order[:i], (name, p.run)


def test_stages_from_copies_a_prior_trained_with_the_same_settings(tmp_path, monkeypatch, capsys) -> None:
    """``--stages_from``: after the model stages, a prior that run trained with this run's settings is copied too
    (whether the state-only variant trains does not count); the state-only prior it lacks trains here. A prior
    with other settings trains here."""
    monkeypatch.delenv("FORETHOUGHT_DATA", raising=False)
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    base = ["psf", "recipe", "--config", "tiny", "--run.out_dir", str(tmp_path), "--longer_blocks.blocks", "[]",
            "--baselines", "[]", "--self_realized.enabled", "false"]
    assert cli.main([*base, "--run.name", "a", "--prior.state_only_variant", "false"]) == 0
    assert cli.main([*base, "--run.name", "fresh", "--prior.state_only_variant", "true"]) == 0
    capsys.readouterr()
    assert cli.main([*base, "--run.name", "b", "--prior.state_only_variant", "true",
                     "--stages_from", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    assert "prior: complete, skipped" in printed and "prior_state_only: complete" not in printed
    res = json.loads((tmp_path / "b" / "results.json").read_text())
    assert res["stages_from"]["stages"] == ["base", "landing", "codes", "prior"]
    assert (tmp_path / "b" / "prior" / "copied_from.txt").read_text().strip() == str(tmp_path / "a")
    for stage in ("prior", "prior_state_only"):  # the same weights as training them here
        x = load_file(str(latest_checkpoint(tmp_path / "fresh" / stage) / "model.safetensors"))
        y = load_file(str(latest_checkpoint(tmp_path / "b" / stage) / "model.safetensors"))
        assert all(torch.equal(x[k], y[k]) for k in x), stage
    assert cli.main([*base, "--run.name", "c", "--prior.state_only_variant", "false", "--prior.train.steps", "3",
                     "--stages_from", str(tmp_path / "a")]) == 0
    res = json.loads((tmp_path / "c" / "results.json").read_text())
    assert res["stages_from"]["stages"] == ["base", "landing", "codes"]


@pytest.fixture(scope="module")
def codes(tmp_path_factory) -> dict:
    """psf_codes collected from a copy of its committed archive under a fresh root."""
    spec, path = load_spec("psf_codes")
    layout = Layout.under(tmp_path_factory.mktemp("psf_codes"), "psf_codes")
    shutil.copytree(RESULTS / "runs" / "psf_codes", layout.archive)
    return collect(spec, layout, "test", spec_file=path)


def _same_stats(new: dict, old: dict) -> None:
    for key in ("seeds", "per_seed", "mean", "std", "ci95_of_mean"):
        assert new[key] == pytest.approx(old[key], abs=1e-12), key


def test_psf_codes_reproduces_its_legacy_json(codes) -> None:
    old = json.loads((RESULTS / "legacy" / "psf_codes.json").read_text())
    assert set(codes["runs"]) == set(old["runs"]) and codes["unfinished"] == ["prior_mean_wide_30k-s0"]
    main, derived = old["main"], codes["derived"]
    matched = {"psf_persistence_matched": "psf", "state_only_persistence_matched": "psf_state_only"}
    for key, stats in main["measures"].items():
        if key == "seed":  # the old script summarised its records' seed numbers too
            continue
        new = (derived["matched_point_persistence"]["main"][matched[key]] if key in matched
               else codes["groups"]["main"]["measures"][key])
        _same_stats(new, stats)
    for name, stats in main["comparisons"].items():
        _same_stats(derived["main_minus_state_only"]["main"][name.removeprefix("main - state-only: ")], stats)
    checks = {c["value"].split(".")[2]: c for c in codes["checks"].values() if c["value"].startswith("groups.")}
    for key, target in main["targets"].items():
        assert checks[key]["observed"] == pytest.approx(target["mean"], abs=1e-12)
        assert f"{checks[key]['op']} {checks[key]['threshold']}" == target["target"]
        assert checks[key]["passed"] is True
    lows = derived["zeroing_cost_interval_lows"]["main"]
    assert [lows[str(s)] for s in main["seeds"]] == pytest.approx(main["targets"]["zeroing_cost"]["interval_lows"],
                                                                  abs=1e-12)
    assert all(c["passed"] is main["targets"]["zeroing_cost"]["pass"] for c in codes["checks"].values()
               if "zeroing" in c["value"])
    compared = 0
    for prefix, arms in (("prior_", old["prior_arms"]), ("decoder_", old["decoder_arms"])):
        for arm, a in arms.items():
            group = prefix + arm
            for key, stats in a["measures"].items():
                _same_stats(codes["groups"][group]["measures"][key], stats)
            reference = f"{prefix}reference"
            for key, stats in a["minus_reference"].items():
                c = codes["comparisons"].get(f"{group} − {reference} ({key})")
                if c is not None:
                    _same_stats(c, stats)
                    compared += 1
    missing = [n for n, c in codes["comparisons"].items() if "missing" in c]  # the arm never run
    assert compared == len(codes["comparisons"]) - len(missing) == 24 and all("mean_wide_30k" in n for n in missing)


def test_psf_trade_runs_on_fresh_seeds_and_derives_state_only_minus_main() -> None:
    """psf_trade: seeds no earlier planted spec used; its derive pairs the two configurations of each seed's run."""
    from forethought.experiments.psf_trade import derive

    trade, _ = load_spec("psf_trade")
    used = {s for name in ("psf_codes", "psf_codes_pilot", "psf_states_ablation", "psf_prompted", "psf_planted",
                           "psf_code_dropout") for p in plan(load_spec(name)[0]) for s in [p.seed]}
    assert len(trade.seeds) == 3 and not set(trade.seeds) & used
    groups = {"trade": {"measures": {
        "prior_nll": {"seeds": [3, 4], "per_seed": [3.0, 2.9]},
        "state_only_nll": {"seeds": [3, 4], "per_seed": [2.8, 2.8]},
        "prior_persistence": {"seeds": [3, 4], "per_seed": [0.62, 0.64]},
        "state_only_persistence": {"seeds": [4], "per_seed": [0.54]}}}}
    out = derive({}, {"groups": groups})["state_only_minus_main"]
    assert out["NLL/token, temperature 1"]["per_seed"] == pytest.approx([-0.2, -0.1])
    assert out["persistence, temperature 1"]["seeds"] == [4] and out["persistence, temperature 1"]["mean"] == \
        pytest.approx(-0.10)
