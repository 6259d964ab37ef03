"""The grid specs' derive functions on hand-made records: seed-paired differences (also against another answer of a
run, e.g. the Generator's rank decoder), agreement with a run's own rank decoder and written answer, and the
paper's table with the paper's numbers beside ours."""

from __future__ import annotations

import pytest

from forethought.experiments.paper_grid import PAPER_LLAMA2_7B, grid, paper_table


def _records() -> tuple[dict, dict]:
    acc = {("arc-easy-generator", 0): (0.50, 0.60), ("arc-easy-generator", 1): (0.52, 0.64),
           ("arc-easy-predgen-tz", 0): (0.58, 0.59), ("arc-easy-predgen-tz", 1): (0.60, 0.61),
           ("arc-easy-predictor", 0): (0.30, None), ("arc-easy-predictor", 1): (0.34, None)}
    records, runs = {}, {}
    for (group, seed), (own, rank) in acc.items():
        run = f"{group}-s{seed}"
        results = {"accuracy": own, **({"rank": {"accuracy": rank}, "rank_norm": {"accuracy": rank + 0.05}}
                                       if rank is not None else {})}
        preds = [{"prediction": "A", "rank": "A" if i < 3 else "B", "rank_norm": "A" if i < 1 else "B",
                  "decoded": "A" if i < 2 else "C"} for i in range(4)]
        records[run] = {"results": results, "predictions": preds if rank is not None else []}
        runs[run] = {"group": group, "seed": seed}
    numbers = [{"prediction": 3.1, "decoded": 3.0}, {"prediction": 2.0, "decoded": 2.0}]
    records["stsb-predgen-s0"] = {"results": {"mse": 0.7}, "predictions": numbers}
    runs["stsb-predgen-s0"] = {"group": "stsb-predgen", "seed": 0}
    return records, {"runs": runs}


def test_grid_pairs_by_seed_and_reads_other_answers() -> None:
    out = grid(*_records())
    c = out["comparisons"]
    assert c["arc-easy: predgen-tz − generator"]["per_seed"] == pytest.approx([0.08, 0.08])
    assert c["arc-easy: predgen-tz − generator:rank"]["mean"] == pytest.approx(-0.03)
    # the per-character rank decoder is a bar of its own beside the summed one
    assert c["arc-easy: predgen-tz − generator:rank_norm"]["per_seed"] == pytest.approx([-0.07, -0.09])
    assert c["arc-easy: generator − predictor"]["metric"] == "accuracy"
    assert "arc-easy: predgen-tz − predgen-ll" not in c  # a variant that did not run is left out
    agree = out["agreement"]["arc-easy-predgen-tz"]
    assert agree["with_rank"]["mean"] == pytest.approx(0.75) and agree["with_written"]["mean"] == pytest.approx(0.5)
    assert agree["with_rank_norm"]["mean"] == pytest.approx(0.25)
    assert "arc-easy-predictor" not in out["agreement"]  # it writes nothing
    assert "stsb-predgen" not in out["agreement"]  # regression: numbers, not labels that agree


def test_paper_table_sets_the_paper_number_beside_ours() -> None:
    table = paper_table(*_records())["table"]
    assert table["arc-easy"]["generator"]["mean"] == pytest.approx(0.51)
    assert table["arc-easy"]["generator"]["paper"] == PAPER_LLAMA2_7B["arc-easy/generator"] == 79.54
    assert table["arc-easy"]["predgen"] == {"paper": 84.79}  # only the run group named by the method counts
    assert table["stsb"]["predgen"]["metric"] == "mse" and "paper" not in table["stsb"]["predgen"]


def test_paper_table_reports_the_rank_bar_and_agreement_beside_the_table() -> None:
    """The paper grid's variants are the bare methods: PredGen is read against the Generator's rank decoder and
    its agreement with its own rank decoder and written answer, per seed, as the CPU grid's T(Z)."""
    records, collected = _records()
    renamed = {k.replace("predgen-tz", "predgen"): v for k, v in records.items()}
    runs = {k.replace("predgen-tz", "predgen"): {**v, "group": v["group"].replace("predgen-tz", "predgen")}
            for k, v in collected["runs"].items()}
    out = paper_table(renamed, {"runs": runs})
    bar = out["comparisons"]["arc-easy: predgen − generator:rank"]
    assert bar["per_seed"] == pytest.approx([-0.02, -0.04]) and bar["metric"] == "accuracy"
    assert out["agreement"]["arc-easy-predgen"]["with_rank"]["mean"] == pytest.approx(0.75)
    assert "arc-easy: predgen − generator:rank" not in paper_table(*_records())["comparisons"]  # no such group


def test_paper_table_renders_in_the_papers_layout() -> None:
    from forethought.report.predgen import paper_table as render

    records, collected = _records()
    lines = render({"derived": paper_table(records, collected)})
    assert lines[0] == "| dataset | metric | Predictor | Generator | PredGen |"
    arc = next(line for line in lines if line.startswith("| arc-easy |"))
    assert "| 0.510 ± 0.014 (2) · paper 79.54 % |" in arc and arc.endswith("| – · paper 84.79 % |")
    assert next(line for line in lines if line.startswith("| stsb |")) == "| stsb | mse | – | – | 0.700 (1) |"
    assert render({"derived": {}}) == []


def test_grid_reads_each_seed_over_the_test_items() -> None:
    """``items``: per seed, the paired per-item difference of two runs' answers (matched by id) with its bootstrap
    interval and McNemar's p; the Generator's rank decoder is its ``rank`` answer; runs on other items are left
    out (their difference would not be paired)."""
    targets = ["A", "B", "C", "D"] * 10  # 40 items
    gen = [{"id": f"q{i}", "target": t, "prediction": t if i < 12 else "A", "rank": t if i < 20 else "A"}
           for i, t in enumerate(targets)]
    tz = [{"id": f"q{i}", "target": t, "prediction": t if i < 30 else "A", "decoded": "A"}
          for i, t in enumerate(targets)]
    acc = lambda rows, key: sum(r[key] == r["target"] for r in rows) / len(rows)  # noqa: E731
    records = {"obqa-generator-s0": {"results": {"accuracy": acc(gen, "prediction"),
                                                  "rank": {"accuracy": acc(gen, "rank")}}, "predictions": gen},
               "obqa-predgen-tz-s0": {"results": {"accuracy": acc(tz, "prediction")}, "predictions": tz},
               "obqa-predictor-s0": {"results": {"accuracy": 0.25},
                                     "predictions": [{**r, "id": "other" + r["id"]} for r in gen]}}
    runs = {r: {"group": r[:-3], "seed": 0} for r in records}
    items = grid(records, {"runs": runs})["items"]
    one = items["obqa: predgen-tz − generator"]["seed 0"]
    assert one["difference"] == pytest.approx(acc(tz, "prediction") - acc(gen, "prediction")) and one["n"] == 40
    assert one["ci95"][0] <= one["difference"] <= one["ci95"][1] and 0 <= one["mcnemar_p"] <= 1
    rank = items["obqa: predgen-tz − generator:rank"]["seed 0"]
    assert rank["difference"] == pytest.approx(acc(tz, "prediction") - acc(gen, "rank"))
    assert "obqa: predgen-tz − predictor" not in items  # other test items: no paired reading
    assert "obqa: predgen-tz − predictor" in grid(records, {"runs": runs})["comparisons"]


def test_grid_plot_draws_a_panel_per_task(tmp_path) -> None:
    from forethought.experiments.paper_grid import grid_plot

    seeds = lambda *v: {"per_seed": list(v)}  # noqa: E731
    groups = {"obqa-generator": {"measures": {"accuracy": seeds(0.3, 0.32), "rank_accuracy": seeds(0.25, 0.27),
                                                  "rank_norm_accuracy": seeds(0.31, 0.33)}},
              "obqa-predgen-tz": {"measures": {"accuracy": seeds(0.4, 0.42)}},
              "stsb-predictor": {"measures": {"mse": seeds(0.7)}}}
    grid_plot({"groups": groups}, tmp_path / "g.png")
    from PIL import Image

    with Image.open(tmp_path / "g.png") as im:  # two panels side by side: wider than tall
        assert im.size[0] > im.size[1] > 100
    grid_plot({"groups": {}}, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()  # nothing measured yet: no figure
