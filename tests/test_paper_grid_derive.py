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
        results = {"accuracy": own, **({"rank": {"accuracy": rank}} if rank is not None else {})}
        preds = [{"prediction": "A", "rank": "A" if i < 3 else "B", "decoded": "A" if i < 2 else "C"} for i in range(4)]
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
    assert c["arc-easy: generator − predictor"]["metric"] == "accuracy"
    assert "arc-easy: predgen-tz − predgen-ll" not in c  # a variant that did not run is left out
    agree = out["agreement"]["arc-easy-predgen-tz"]
    assert agree["with_rank"]["mean"] == pytest.approx(0.75) and agree["with_written"]["mean"] == pytest.approx(0.5)
    assert "arc-easy-predictor" not in out["agreement"]  # it writes nothing
    assert "stsb-predgen" not in out["agreement"]  # regression: numbers, not labels that agree


def test_paper_table_sets_the_paper_number_beside_ours() -> None:
    table = paper_table(*_records())["table"]
    assert table["arc-easy"]["generator"]["mean"] == pytest.approx(0.51)
    assert table["arc-easy"]["generator"]["paper"] == PAPER_LLAMA2_7B["arc-easy/generator"] == 79.54
    assert table["arc-easy"]["predgen"] == {"paper": 84.79}  # only the run group named by the method counts
    assert table["stsb"]["predgen"]["metric"] == "mse" and "paper" not in table["stsb"]["predgen"]


def test_paper_table_renders_in_the_papers_layout() -> None:
    from forethought.report.predgen import paper_table as render

    records, collected = _records()
    lines = render({"derived": paper_table(records, collected)})
    assert lines[0] == "| dataset | metric | Predictor | Generator | PredGen |"
    arc = next(line for line in lines if line.startswith("| arc-easy |"))
    assert "| 0.510 ± 0.014 (2) · paper 79.54 % |" in arc and arc.endswith("| – · paper 84.79 % |")
    assert next(line for line in lines if line.startswith("| stsb |")) == "| stsb | mse | – | – | 0.700 (1) |"
    assert render({"derived": {}}) == []
