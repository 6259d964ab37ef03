"""The myopia_arithmetic and myopia_scaling specs: their runs and measures, and the scaling derive (the gap per
size, smallest first, and whether it grows) on a collected JSON written by hand."""

from __future__ import annotations

from forethought.experiments.myopia_scaling import gap_by_size, paper_gaps, scaling
from forethought.experiments.spec import load_spec, plan


def _stats(values: list[float]) -> dict:
    return {"seeds": list(range(len(values))), "mean": sum(values) / len(values), "ci95_of_mean": [-1.0, 1.0]}


def test_specs_plan_their_runs() -> None:
    arith, _ = load_spec("myopia_arithmetic")
    runs = plan(arith)
    assert len(runs) == 9 and {r.group for r in runs} == {"vanilla", "detach_hidden", "vanilla_no_filler"}
    assert all("--config small" in " ".join(r.steps[0]) for r in runs)
    # the control differs from the vanilla runs by the padding alone
    pad = {r.group: " ".join(r.steps[0]).count("--task.pad 2") for r in runs}
    assert pad == {"vanilla": 0, "detach_hidden": 0, "vanilla_no_filler": 1}
    scale, _ = load_spec("myopia_scaling")
    runs = plan(scale)
    assert sum(r.group.startswith("model-") for r in runs) == 3 and len(runs) == 3 + 3 * 3


def test_gap_by_size_orders_by_parameters() -> None:
    collected = {"groups": {
        "model-a": {"measures": {}},
        "big": {"measures": {"params": _stats([2e6]), "vanilla": _stats([4.0, 4.2]), "myopic": _stats([4.1, 4.4]),
                             "gap": _stats([0.1, 0.2])}},
        "small": {"measures": {"params": _stats([5e5]), "vanilla": _stats([5.0]), "myopic": _stats([5.05]),
                               "gap": _stats([0.05])}}}}
    rows = gap_by_size(collected)
    assert [r["group"] for r in rows] == ["small", "big"] and abs(rows[1]["gap"] - 0.15) < 1e-12
    derived = scaling({}, collected)
    assert derived["gap_grows_with_size"] is True
    collected["groups"]["small"]["measures"]["gap"] = _stats([0.3])
    assert scaling({}, collected)["gap_grows_with_size"] is False
    assert paper_gaps()["2.8b"]["gap"] == 0.23 and paper_gaps()["160m"]["gap"] == 0.1


def _arith_results(variant: str, acc1: float, acc2: float) -> dict:
    by = {"1": acc1, "2": acc2}
    return {"variants": {variant: {"by_digits": by, "accuracy": (acc1 + acc2) / 2, "token_accuracy": acc2,
                                   "train_wall_s": 1.0}}}


def test_arithmetic_spec_collects_per_digit_count(tmp_path) -> None:
    """Records shaped as `myopia arithmetic` writes them -> every measure, the seed-paired comparisons and the
    checks (fed by hand: vanilla multiplies, myopic does not), and the plot."""
    import json

    from forethought.experiments.runner import Layout, collect

    spec, path = load_spec("myopia_arithmetic")
    layout = Layout.under(tmp_path, spec.name)
    for run in plan(spec, layout.runs):
        vanilla = run.group.startswith("vanilla")
        folder = layout.runs / run.run
        folder.mkdir(parents=True)
        res = _arith_results(run.settings["variant"], 1.0, 0.95 + 0.01 * run.seed if vanilla else 0.1 * run.seed)
        (folder / "results.json").write_text(json.dumps(res))
        (folder / "env.json").write_text(json.dumps({"command": " ".join(run.steps[0]), "machine": {},
                                                     "started": "2026-01-01T00:00:00"}))
    out = collect(spec, layout, "pytest", path)
    comp = out["comparisons"]["vanilla − myopic (2 × 2)"]
    diffs = [0.95 + 0.01 * seed - 0.1 * seed for seed in spec.seeds]
    assert comp["seeds"] == spec.seeds and abs(comp["mean"] - sum(diffs) / len(diffs)) < 1e-9 and comp["ci95_low"] > 0
    assert out["comparisons"]["vanilla − myopic (1 × 1)"]["mean"] == 0
    assert all(c["passed"] for c in out["checks"].values())
    assert (layout.results.parent / "myopia_arithmetic.png").is_file()
