"""``forethought psf prompted`` at toy size: two tiny planted recipes (the unconditional prior, and the conditioned
one started from the first's base stage with --stages_from), the prompted continuations of the three methods and
the true ones, the unprompted samples; bad input is one line and exit 2 before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_planted import PLANTED_TINY  # the tiny planted-corpus settings the PSF tests share

from forethought import cli
from forethought.experiments.psf_bench import prompted as over_seeds
from forethought.psf import prompted

RECIPE = ["psf", "recipe", "--config", "tiny", "--landing.enabled", "false", "--self_realized.enabled", "false",
          "--codes.enabled", "false", "--longer_blocks.blocks", "[]", "--baselines", "[]", "--prior.model.steps", "4",
          *PLANTED_TINY, "--data.planted.test_documents", "16"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """``a``: base + the unconditional prior; ``b``: a's base stage copied, the conditioned prior trained."""
    root = tmp_path_factory.mktemp("prompted")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FORETHOUGHT_CACHE", str(root / "cache"))
        assert cli.main([*RECIPE, "--run.out_dir", str(root), "--run.name", "a"]) == 0
        assert cli.main([*RECIPE, "--run.out_dir", str(root), "--run.name", "b", "--prior.model.conditioning",
                         "known_mask", "--stages_from", str(root / "a")]) == 0
    assert json.loads((root / "b" / "results.json").read_text())["stages_from"]["stages"] == ["base"]
    return root


def _prompted(runs: Path, name: str, *extra: str, a: str = "a", b: str = "b") -> int:
    return cli.main(["psf", "prompted", "--recipe_run", str(runs / a), "--conditioned_run", str(runs / b),
                     "--prompts", "8", "--n_boot", "50", "--batch_size", "4", "--run.out_dir", str(runs),
                     "--run.name", name, *extra])


def test_prompted_scores_every_method_and_the_unprompted_samples(runs: Path, monkeypatch) -> None:
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(runs / "cache"))
    assert _prompted(runs, "p", "--prompted_blocks", "[1, 2]") == 0
    res = json.loads((runs / "p" / "results.json").read_text())
    assert res["prompted_blocks"] == [1, 2] and res["prompts"] == 8 and res["chance_stay"] == 0.25
    row = res["prompted"]["1"]
    assert set(row) == {"true", "replace", "conditioned", "conditioned_no_replace", "differences"}
    assert set(row["differences"]) == {"true - replace", "conditioned - replace", "conditioned_no_replace - replace"}
    e = row["true"]["continuation_nll"]
    assert e["interval"][0] <= e["mean"] <= e["interval"][1]
    # the true continuations beat a toy model's: a lower NLL per token given the prompt, the interval below zero
    d = row["differences"]["true - replace"]["continuation_nll"]
    assert d["diff"] < 0 and d["interval"][1] < 0
    u = res["unprompted"]
    assert set(u) == {"unconditional", "conditioned", "true"}
    assert u["true"]["nll_per_token"]["mean"] < u["unconditional"]["nll_per_token"]["mean"]
    # the same seed gives the same continuations: a run of one prompt length repeats that length's numbers
    assert _prompted(runs, "p1", "--prompted_blocks", "[1]", "--unprompted", "false") == 0
    one = json.loads((runs / "p1" / "results.json").read_text())
    assert one["prompted"]["1"] == row and "unprompted" not in one


def test_bad_input_is_one_line_before_any_model_loads(runs: Path, monkeypatch, capsys) -> None:
    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(prompted, "load_recipe", no_model)
    cases = [(["--prompted_blocks", "[4]"], {}, "every m must be in 1..3"),  # K = 4: m = 4 leaves nothing
             (["--prompted_blocks", "[1]", "--prompts", "17"], {}, "test split holds 16 documents, 17 asked"),
             ([], {"a": "b", "b": "a"}, "recipe_run needs 'none'"),  # the two runs swapped
             ([], {"b": "nowhere"}, "is not a finished 'psf recipe' run folder"),
             ([], {"b": "p"}, "is not a finished 'psf recipe' run folder"),  # a prompted run's folder
             (["--prompted_blocks", "[]", "--unprompted", "false"], {}, "nothing to measure")]
    for extra, swap, message in cases:
        assert _prompted(runs, "bad", *extra, **swap) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
        assert not (runs / "bad").exists()
    assert cli.main(["psf", "prompted"]) == 2 and "needs --recipe_run" in capsys.readouterr().err


def test_derive_pairs_each_method_with_replace_by_seed() -> None:
    """psf_prompted's derive: per prompt length, each method − replace on the seeds both have, with the Student-t
    interval over seeds; groups without a prompt length (the recipes, unprompted) are left out."""
    runs = {f"prompted-m=1-s{s}": {"group": "prompted-m=1", "seed": s,
                                   "measures": {"nll_replace": 3.0 + s / 10, "nll_conditioned": 3.1 + s / 10,
                                                "nll_true": 2.0, "junction_replace": 0.6}}
            for s in (0, 1, 2)}
    runs["prompted-m=1-s2"]["measures"].pop("nll_conditioned")  # a seed without that measure pairs nothing
    runs["unprompted-s0"] = {"group": "unprompted", "seed": 0, "measures": {"unprompted_nll_true": 2.0}}
    groups = {"prompted-m=1": {"settings": {"m": 1}}, "unprompted": {"settings": {}}}
    d = over_seeds({}, {"runs": runs, "groups": groups})["differences"]
    assert list(d) == ["m=1"] and set(d["m=1"]) == {"conditioned − replace", "true − replace"}
    c = d["m=1"]["conditioned − replace"]["nll"]
    assert c["seeds"] == [0, 1] and c["per_seed"] == pytest.approx([0.1, 0.1]) and c["mean"] == pytest.approx(0.1)
    t = d["m=1"]["true − replace"]["nll"]
    assert t["per_seed"] == pytest.approx([-1.0, -1.1, -1.2]) and t["ci95_of_mean"][1] < 0
    assert "junction" not in d["m=1"]["true − replace"]  # no junction_true measured
