"""`forethought predgen answer-tokens` through the real CLI on a data file and a tiny tokenizer: the counts are the
tokenizer's own (answer text after a space, plus EOS), and a bad setting is refused before anything is written."""

from __future__ import annotations

import json

import pytest
from cli_harness import expect_clean_failure

from forethought.cli import main
from forethought.testing import tiny_llama_folder, write_csv

ROWS = [{"text": t, "label": lab} for t, lab in [("good movie", "positive"), ("bad plot", "negative"),
                                                  ("a great actor", "positive"), ("dull", "negative")] * 10]


def test_counts_are_the_tokenizers(tmp_path) -> None:
    pytest.importorskip("transformers")
    data = write_csv(tmp_path / "reviews.csv", ROWS)
    tok = tiny_llama_folder(tmp_path / "tiny", "\n".join(f"{r['text']} {r['label']}" for r in ROWS) * 5, 300,
                            hidden_size=16, layers=1, heads=2, kv_heads=1)
    assert main(["predgen", "answer-tokens", "--base", str(tmp_path / "tiny"), "--task.name", str(data),
                 "--task.target_field", "label", "--prompt_examples", "3", "--run.out_dir", str(tmp_path / "runs"),
                 "--run.name", "at"]) == 0
    r = json.loads((tmp_path / "runs" / "at" / "results.json").read_text())
    lengths = {w: len(tok(" " + w, add_special_tokens=False)["input_ids"]) + 1 for w in ("negative", "positive")}
    assert r["examples"] == len(ROWS)  # train + eval splits of the file
    assert (r["answer_tokens_min"], r["answer_tokens_max"]) == (min(lengths.values()), max(lengths.values()))
    assert min(lengths.values()) <= r["answer_tokens_mean"] <= max(lengths.values())
    assert r["prompt_examples"] == 3 and r["prompt_tokens_mean"] > 0
    assert set(r["label_tokens"]) == {"negative", "positive"}


def test_bad_setting_one_line(tmp_path) -> None:
    runs = tmp_path / "runs"
    expect_clean_failure(["predgen", "answer-tokens", "--prompt_examples", "0", "--run.out_dir", str(runs)], tmp_path,
                         runs, ["prompt_examples"], in_process=True)
    assert not runs.exists()
