"""The PredGen specs: each loads and its commands parse; collecting from a copy of a committed archive reproduces the
numbers of the JSON the old benchmark script wrote (``benchmarks/results/legacy/``), read from that file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forethought.cli import check_command
from forethought.experiments.runner import Layout, collect
from forethought.experiments.spec import load_spec, plan, shipped_specs

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PREDGEN_SPECS = sorted(p.stem for p in shipped_specs() if p.stem.startswith("predgen_"))
PARTIAL = {"predgen_mc", "predgen_grid"}  # predgen_mc: 33 of its 87 planned runs ran; predgen_grid: 49 of 54


def test_every_predgen_benchmark_has_a_spec() -> None:
    assert {"predgen_tasks", "predgen_curves", "predgen_mc"} <= set(PREDGEN_SPECS)


@pytest.mark.parametrize("name", PREDGEN_SPECS)
def test_spec_loads_and_its_commands_parse(name: str) -> None:
    spec, _ = load_spec(name)
    assert spec.system == "predgen" and spec.description and spec.cost
    planned = plan(spec)
    for p in planned:
        for argv in p.steps:
            check_command(argv)
    archive = RESULTS / "runs" / name
    if archive.is_dir():  # the archived records are planned runs; all of them but where only part of a plan ran
        archived = {f.stem for f in archive.glob("*.json")}
        assert archived <= {p.run for p in planned}
        assert archived == {p.run for p in planned} or name in PARTIAL


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> dict[str, dict]:
    """Each archived spec collected once, from a copy of its archive under a fresh root."""
    out = {}
    for name in ("predgen_tasks", "predgen_curves"):
        spec, path = load_spec(name)
        layout = Layout.under(tmp_path_factory.mktemp(name), name)
        shutil.copytree(RESULTS / "runs" / name, layout.archive)
        out[name] = collect(spec, layout, "test", spec_file=path)
    return out


def _legacy(name: str) -> dict:
    return json.loads((RESULTS / "legacy" / f"{name}.json").read_text())


def _same(new: dict, old: dict) -> None:
    """``new`` (a compacted :func:`forethought.predgen.compare.paired`) equals ``old`` (its full answer)."""
    if "mcnemar" in old:
        assert new == {"difference": old["difference"], "ci95": old["ci95"], "mcnemar_p": old["mcnemar"]["p_value"],
                       "b": old["mcnemar"]["b"], "c": old["mcnemar"]["c"]}
    else:
        assert new == {k: {"difference": old[k]["difference"], "ci95": old[k]["ci95"]} for k in ("mse", "pearson")}


def _new_name(task: str, legacy: str, metric: str) -> tuple[str, str]:
    """A legacy comparison key ('predgen-lr5e-4_decoded_minus_generator-lr5e-4') -> the spec's comparison name and
    the measure it compares."""
    a, b = legacy.split("_minus_")
    written = a.endswith("_decoded")
    a = a.removesuffix("_decoded")
    return (f"{task}-{a} − {task}-{b}" + (" (written)" if written else ""),
            f"written_{metric}" if written else metric)


def test_predgen_tasks_reproduces_its_legacy_json(collected) -> None:
    new, old = collected["predgen_tasks"], _legacy("predgen_tasks")
    assert new["provenance"]["wall_s"] == old["wall_s"]
    checked = 0
    for task, e in old["tasks"].items():
        k = e["metric"]
        for variant, m in e["methods"].items():
            group = f"{task}-{variant}"
            stats = new["groups"][group]["measures"]
            assert stats[k]["mean"] == pytest.approx(m[k], abs=1e-12)
            assert stats[k]["std"] == (None if m[f"{k}_std"] is None else pytest.approx(m[f"{k}_std"], abs=1e-12))
            for seed, row in m["per_seed"].items():
                got = new["runs"][f"{group}-s{seed}"]["measures"]
                for key, value in row.items():
                    if key == "decoded":
                        for dk, dv in (value or {}).items():
                            if f"written_{dk}" in got:
                                assert got[f"written_{dk}"] == dv
                                checked += 1
                    elif value is not None:
                        assert got[key] == value
                        checked += 1
            for seed, g in m["gradients_per_seed"].items():
                assert new["derived"]["gradients"][f"{group}-s{seed}"] == g
        for key, d in e["paired"].items():
            a, b = key.split("_minus_")
            if b.endswith("_decoded"):  # a PredGen variant's prediction − its own written answer
                assert a == b.removesuffix("_decoded")
                got = new["derived"]["prediction_vs_written"][f"{task}-{a}"]
                assert got["seed_mean_difference"] == pytest.approx(d["seed_mean_difference"], abs=1e-12)
                assert got["ci95_of_seed_mean"] == (None if d["ci95_of_seed_mean"] is None
                                                    else pytest.approx(d["ci95_of_seed_mean"], abs=1e-12))
            else:
                name, measure = _new_name(task, key, k)
                c = new["comparisons"][name]
                assert c["measure"] == measure and c["seeds"] == d["seeds"]
                assert c["mean"] == pytest.approx(d["seed_mean_difference"], abs=1e-12)
                assert c["per_seed"] == pytest.approx(d["per_seed_difference"], abs=1e-12)
                assert c["ci95_of_mean"] == (None if d["ci95_of_seed_mean"] is None
                                             else pytest.approx(d["ci95_of_seed_mean"], abs=1e-12))
                got = new["derived"]["paired"][name]
            for seed, row in d["per_seed"].items():
                _same(got["per_seed"][seed] if "per_seed" in got and "metric" in got else got[seed], row)
                checked += 1
    assert checked > 200
    assert all(c["passed"] for c in new["checks"].values())


def test_predgen_curves_reproduces_its_legacy_json(collected) -> None:
    new, old = collected["predgen_curves"], _legacy("predgen_curves")
    for task, e in old["tasks"].items():
        for method, m in e["methods"].items():
            run = f"{task}-{method}-s{old['seed']}"
            got = new["runs"][run]["measures"]
            assert (got["accuracy"], got["macro_f1"], got["eval_examples"], got["train_wall_s"]) == (
                m["accuracy"], m["macro_f1"], m["eval_examples"], m["train_wall_s"])
            assert got.get("written_accuracy") == m["decoded_accuracy"]
            assert new["derived"]["curves"][run] == m["curve"]
            assert new["derived"]["gradients"].get(run) == m["gradients"]
            assert new["provenance"]["runs"][run]["command"] == m["command"]
        for key, d in e["paired"].items():
            if key == "predgen_adapter_minus_its_decoded":
                _same(new["derived"]["prediction_vs_written"][f"{task}-predgen"]["per_seed"]["0"], d)
                continue
            a, b = key.split("_minus_")
            name = f"{task}-{a.removesuffix('_decoded')} − {task}-{b}" + (" (written)" if a.endswith("_decoded")
                                                                           else "")
            _same(new["derived"]["paired"][name]["0"], d)
            assert new["comparisons"][name]["mean"] == pytest.approx(d["difference"], abs=1e-12)
    assert new["provenance"]["wall_s"] == old["wall_s"]
    assert all(c["passed"] for c in new["checks"].values())


@pytest.mark.parametrize("name", ["predgen_tasks", "predgen_curves"])
def test_committed_json_is_what_collect_writes(collected, name: str) -> None:
    """benchmarks/results/<name>.json holds the numbers a collect from the archive gives."""
    new, committed = collected[name], json.loads((RESULTS / f"{name}.json").read_text())
    for key in ("runs", "groups", "comparisons", "derived", "checks"):
        assert new[key] == committed[key]


def test_paired_on_examples_from_hand_made_records() -> None:
    """The derive function on four hand-made runs: a written-answer comparison pairs the 'decoded' fields, a
    prediction comparison the predictions, PredGen's prediction is paired with its own written answer, and the
    gradient medians come from the training log."""
    from forethought.experiments.predgen import curves

    targets = ["A", "B", "C", "D"] * 5
    right = {"predictor": range(5), "generator": range(10), "predgen": range(2)}  # PredGen's written: 0-11
    records, runs = {}, {}
    for method, good in right.items():
        rows = [{"id": f"e{i}", "target": t, "prediction": t if i in good else "Z"} for i, t in enumerate(targets)]
        if method != "predictor":
            for i, r in enumerate(rows):
                r["decoded"] = r["prediction"] if method == "generator" else r["target"] if i < 12 else "Z"
        log = [{"step": 2, "loss": 1.0, "l_w": 0.5, "l_d": 1.2, "grad_norm_writer": 1.0, "grad_norm_head": 2.0}]
        records[f"t-{method}-s0"] = {
            "results": {"method": method, "accuracy": len(good) / 20, "decoded": {"accuracy": 0.6},
                        "learning_curve": [{"step": 1, "examples_seen": 2, "accuracy": 0.5, "macro_f1": 0.5}]},
            "predictions": rows, "train_log": log if method == "predgen" else []}
        runs[f"t-{method}-s0"] = {"group": f"t-{method}", "seed": 0}
    comparisons = {"written": {"measure": "written_accuracy", "a": "t-predgen", "b": "t-generator"},
                   "adapter": {"measure": "accuracy", "a": "t-predgen", "b": "t-predictor"}}
    out = curves(records, {"runs": runs, "comparisons": comparisons})
    written = out["paired"]["written"]["0"]
    assert written["difference"] == pytest.approx(0.1) and (written["b"], written["c"]) == (2, 0)
    assert out["paired"]["adapter"]["0"]["difference"] == pytest.approx(-0.15)
    own = out["prediction_vs_written"]["t-predgen"]
    assert list(out["prediction_vs_written"]) == ["t-predgen"]  # the Generator's written answer is its prediction
    assert own["per_seed"]["0"]["difference"] == pytest.approx(-0.5) and own["per_seed"]["0"]["c"] == 10
    assert own["seed_mean_difference"] == pytest.approx(0.1 - 0.6) and own["ci95_of_seed_mean"] is None
    assert out["gradients"] == {"t-predgen-s0": {"l_w": 0.5, "l_d": 1.2, "grad_norm_writer": 1.0,
                                                 "grad_norm_head": 2.0, "head_over_writer": 2.0, "logged_steps": 1}}
    assert out["curves"]["t-predictor-s0"] == [{"examples_seen": 2, "accuracy": 0.5}]
