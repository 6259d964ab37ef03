"""The predgen_mc spec: collecting from a copy of its committed archive reproduces every number of the JSON the old
benchmark script wrote (``benchmarks/results/legacy/predgen_mc.json``); the derive on hand-made records names,
pairs and picks as documented."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forethought.experiments.predgen_mc import SELECT, TASKS, mc, side
from forethought.experiments.runner import Layout, collect
from forethought.experiments.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# the legacy JSON's answer names -> the spec's measure prefixes
ANSWER = {"prediction": "", "decoded": "decoded_", "rank": "rank_", "rank_norm": "rank_norm_",
          "expected_value": "expected_value_", "validation": "validation_"}


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> dict:
    spec, path = load_spec("predgen_mc")
    layout = Layout.under(tmp_path_factory.mktemp("mc"), "predgen_mc")
    shutil.copytree(RESULTS / "runs" / "predgen_mc", layout.archive)
    return collect(spec, layout, "test", spec_file=path)


def _legacy() -> dict:
    return json.loads((RESULTS / "legacy" / "predgen_mc.json").read_text())


def _name(task: str, legacy_key: str) -> str:
    """'predgen-choices_minus_generator_rank' -> 'arc-easy: predgen-choices − generator (rank)' (variants use
    hyphens, answer keys underscores)."""
    return f"{task}: " + " − ".join(side(s.replace("_", ":", 1)) for s in legacy_key.split("_minus_"))


def _compacted(row: dict) -> dict:
    if "mcnemar" in row:
        m = row["mcnemar"]
        return {"difference": row["difference"], "ci95": row["ci95"], "mcnemar_p": m["p_value"], "b": m["b"],
                "c": m["c"]}
    return {k: {"difference": row[k]["difference"], "ci95": row[k]["ci95"]} for k in ("mse", "pearson")}


def test_collect_reproduces_the_legacy_json(collected: dict) -> None:
    new, old = collected, _legacy()
    checked = 0
    for task, e in old["tasks"].items():
        metric = e["metric"]
        assert metric == TASKS[task]
        for variant, m in e["methods"].items():
            group = f"{task}-{variant}"
            stats = new["groups"][group]["measures"]
            assert stats["train_wall_s"]["mean"] == pytest.approx(m["train_wall_s"], abs=1e-9)
            for answer, prefix in ANSWER.items():
                if answer not in m:
                    assert f"{prefix}{metric}" not in stats
                    continue
                s = stats[f"{prefix}{metric}"]
                assert s["mean"] == pytest.approx(m[answer], abs=1e-12)
                assert s["std"] == (None if m[f"{answer}_std"] is None else pytest.approx(m[f"{answer}_std"],
                                                                                            abs=1e-12))
                checked += 2
            for seed, row in m["per_seed"].items():
                got = new["runs"][f"{group}-s{seed}"]["measures"]
                for answer, value in row.items():
                    assert got[f"{ANSWER[answer]}{metric}"] == value
                    checked += 1
        for key, d in e["paired"].items():
            name = _name(task, key)
            c, per = new["derived"]["comparisons"][name], new["derived"]["per_example"][name]
            assert c["seeds"] == d["seeds"] and d["metric"] == metric
            assert c["difference"] == pytest.approx(d["seed_mean_difference"], abs=1e-12)
            assert c["per_seed"] == pytest.approx(d["per_seed_difference"], abs=1e-12)
            assert c["ci95"] == (None if d["ci95_of_seed_mean"] is None
                                 else pytest.approx(d["ci95_of_seed_mean"], abs=1e-12))
            assert per == {s: _compacted(row) for s, row in d["per_seed"].items()}
            checked += 4 + len(per)
        assert sum(n.startswith(f"{task}: ") for n in new["derived"]["comparisons"]) == len(e["paired"])
        # the legacy pick counted the likelihood variant (not PredGen) and a single candidate as a choice: PredGen's
        # adapter is now chosen among its T(Z) forms, from the same validation means, and only between two or more
        picks = new["derived"]["selection"].get(task, {})
        old_means = e.get("selection", {}).get("validation", {})
        tz = {v: m for v, m in old_means.items() if v in SELECT}
        if len(tz) > 1:
            assert picks["adapter"]["validation"] == tz and picks["adapter"]["seeds"] == e["selection"]["seeds"]
            assert picks["adapter"]["selected"] == max(tz, key=tz.get)
        else:
            assert "adapter" not in picks
    assert checked > 400
    # the same runs, and the summed run time (start to results) the script reported
    runs = new["provenance"]["runs"]
    assert len(new["runs"]) == 33 and len(new["unfinished"]) == 87 - 33
    assert sum(r["finished"] - r["started"] for r in runs.values()) == pytest.approx(old["wall_s"], abs=1e-6)
    assert len(new["checks"]) == 4 and all(c["passed"] is not None for c in new["checks"].values())
    # each check reads the comparison interval the legacy JSON holds
    for c in new["checks"].values():
        task, _, rest = c["value"].removeprefix("derived.comparisons.").partition(": ")
        legacy = next(d for k, d in old["tasks"][task]["paired"].items() if _name(task, k) == f"{task}: {rest[:-7]}")
        assert c["observed"] == pytest.approx(legacy["ci95_of_seed_mean"][int(rest[-1])], abs=1e-12)


def test_committed_json_is_what_collect_writes(collected: dict) -> None:
    committed = json.loads((RESULTS / "predgen_mc.json").read_text())
    for key in ("runs", "unfinished", "groups", "comparisons", "derived", "checks"):
        assert collected[key] == committed[key]


def _records(rows: dict[str, list[bool]], validation: dict[str, float]) -> tuple[dict, dict]:
    """Hand-made archive records of one seed: per variant which of the examples its prediction got right (PredGen
    variants also write an answer, right on the first half)."""
    records, runs = {}, {}
    for variant, right in rows.items():
        preds = [{"id": f"e{i}", "target": "A", "prediction": "A" if ok else "B"} for i, ok in enumerate(right)]
        results = {"accuracy": sum(right) / len(right), "validation": {"accuracy": validation.get(variant, 0.0)},
                   "train_wall_s": 1.0}
        if variant.startswith("predgen"):
            for i, p in enumerate(preds):
                p["decoded"] = "A" if i < len(right) // 2 else "B"
            results["decoded"] = {"accuracy": 0.5}
        records[f"arc-easy-{variant}-s0"] = {"results": results, "predictions": preds}
        runs[f"arc-easy-{variant}-s0"] = {"group": f"arc-easy-{variant}", "seed": 0}
    return records, {"runs": runs}


def test_mc_pairs_answers_across_runs_and_picks_on_validation() -> None:
    n = 40
    records, collected = _records({"predgen-choices": [True] * 30 + [False] * 10,
                                   "predgen-choices-lmeval": [True] * 10 + [False] * 30,
                                   "generator": [True] * 20 + [False] * 20},
                                  {"predgen-choices": 0.4, "predgen-choices-lmeval": 0.6})
    out = mc(records, collected)
    own = out["comparisons"]["arc-easy: predgen-choices − predgen-choices (decoded)"]
    assert own["seeds"] == [0] and own["difference"] == pytest.approx(30 / n - 0.5) and own["ci95"] is None
    # b: the adapter right where its written answer is wrong (examples 20-29); c = 0
    assert out["per_example"]["arc-easy: predgen-choices − predgen-choices (decoded)"]["0"]["b"] == 10
    gen = out["per_example"]["arc-easy: predgen-choices − generator"]["0"]
    assert gen["difference"] == pytest.approx(0.25) and (gen["b"], gen["c"]) == (10, 0) and gen["mcnemar_p"] < 0.01
    assert "arc-easy: predgen − generator" not in out["comparisons"]  # a variant that did not run pairs with nothing
    # validation picks the lm-eval variant although the eval split prefers the other one (as adapter and as prompt)
    assert out["selection"]["arc-easy"]["adapter"]["selected"] == "predgen-choices-lmeval"
    assert out["selection"]["arc-easy"]["prompt: predgen-choices"]["selected"] == "predgen-choices-lmeval"
    assert "prompt: generator" not in out["selection"]["arc-easy"]  # one prompt ran: nothing to choose
    agree = out["agreement"]["arc-easy: predgen-choices"]["0"]
    assert agree["agrees_written"] == pytest.approx(30 / n)  # predicted A on 0-29, wrote A on 0-19: same on 0-19, 30-39
    assert agree["agrees_rank"] is None  # these records have no rank decoder
