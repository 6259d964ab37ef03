"""Pre-tokenised corpora (``ids:<source>``): .npy rows and streams, raw .bin files, train / valid folders, a
dataset's ``input_ids`` column, the held-out split, the ordered pass over rows, and ``myopia lm`` training on such a
corpus through the real CLI; bad sources refused in one line before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_harness import expect_clean_failure

from forethought.cli import main
from forethought.core.errors import ForethoughtError
from forethought.data.token_ids import (
    dataset_splits,
    hold_out,
    is_token_ids,
    ordered_rows,
    read_token_ids,
    row_align,
    token_id_streams,
)


def _rows(n: int, length: int, seed: int = 0, vocab: int = 500) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, size=(n, length), dtype=np.int64)


def test_npy_rows_hold_out_their_last_percent(tmp_path: Path) -> None:
    rows = _rows(300, 9)
    np.save(tmp_path / "pile.npy", rows)
    data = read_token_ids(f"ids:{tmp_path / 'pile.npy'}")
    assert data.train.shape == (297, 9) and data.valid.shape == (3, 9) and data.row_len == 9
    train, valid = data.streams()
    assert np.array_equal(train, rows[:297].reshape(-1)) and np.array_equal(valid, rows[297:].reshape(-1))
    assert is_token_ids("ids:x") and not is_token_ids("wikitext-2")


def test_folder_of_bin_files_and_uint32(tmp_path: Path) -> None:
    stream = np.arange(1000, dtype=np.uint16) * 7
    stream.tofile(tmp_path / "train.bin")
    np.arange(50, dtype=np.uint32).tofile(tmp_path / "valid.u32.bin")
    data = read_token_ids(f"ids:{tmp_path}")
    assert data.row_len == 0 and np.array_equal(data.train, stream) and data.valid.tolist() == list(range(50))
    assert row_align(f"ids:{tmp_path}", 65) == 1  # a stream: windows start anywhere


def test_data_root_names_a_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    np.save(tmp_path / "ids64.npy", _rows(10, 4))
    monkeypatch.setenv("FORETHOUGHT_DATA", str(tmp_path))
    monkeypatch.chdir(tmp_path.parent)
    assert read_token_ids("ids:ids64.npy").row_len == 4


class _Split:
    """The two things dataset_splits reads from a ``datasets.Dataset``: column names and a column."""

    def __init__(self, **columns: list) -> None:
        self.columns = columns
        self.column_names = list(columns)

    def __getitem__(self, name: str) -> list:
        return self.columns[name]


def test_dataset_columns() -> None:
    rows = _rows(5, 6).tolist()
    both = dataset_splits({"train": _Split(input_ids=rows, text=["a"] * 5), "validation": _Split(input_ids=rows[:2])},
                          "ids:hf:x")
    assert both.row_len == 6 and both.valid.shape == (2, 6)
    pythia = dataset_splits({"train": _Split(Tokens=rows)}, "ids:hf:pythia")  # the name in EleutherAI's samples
    assert pythia.train.shape == (4, 6) and pythia.valid.shape == (1, 6)
    ragged = dataset_splits({"train": _Split(input_ids=[[1, 2, 3], [4, 5], [6], [7, 8]])}, "ids:hf:r")
    assert ragged.row_len == 0 and ragged.train.tolist() == [1, 2, 3, 4, 5, 6, 7]
    with pytest.raises(ForethoughtError, match="no input_ids or Tokens column"):
        dataset_splits({"train": _Split(text=["a"])}, "ids:hf:t")


def test_hold_out_and_ordered_rows() -> None:
    with pytest.raises(ForethoughtError, match="at least 2"):
        hold_out(_rows(1, 3))
    stream = np.arange(5 * 4, dtype=np.int64)  # rows 0..4 of 4 tokens
    assert ordered_rows(stream, 4, 0, 2)[:, 0].tolist() == [0, 4]
    assert ordered_rows(stream, 4, 2, 2)[:, 0].tolist() == [16, 0]  # wraps around after the last row
    assert ordered_rows(stream, 4, 1, 2).tolist() == [[8, 9, 10, 11], [12, 13, 14, 15]]


def test_streams_refuse_a_trained_bpe_and_short_splits(tmp_path: Path) -> None:
    np.save(tmp_path / "r.npy", _rows(200, 5))
    with pytest.raises(ForethoughtError, match="already tokenised"):
        token_id_streams(f"ids:{tmp_path / 'r.npy'}", "bpe:512", 10, "seq_len 8")
    with pytest.raises(ForethoughtError, match="valid split has 10 tokens"):
        token_id_streams(f"ids:{tmp_path / 'r.npy'}", "gpt2", 34, "seq_len 32")


LM = ["myopia", "lm", "--config", "tiny", "--data.tokenizer", "gpt2", "--data.seq_len", "15",
      "--data.eval_sequences", "4", "--data.curve_sequences", "2", "--train.steps", "3", "--variants", "[vanilla]"]


def test_myopia_lm_trains_on_token_rows(tmp_path: Path) -> None:
    """Rows of 16 ids with seq_len 15: every training and evaluation window is one whole row."""
    np.save(tmp_path / "rows.npy", _rows(400, 16, vocab=50257))
    assert main([*LM, "--data.corpus", f"ids:{tmp_path / 'rows.npy'}", "--data.cache_dir", str(tmp_path / "c"),
                 "--run.out_dir", str(tmp_path), "--run.name", "ids"]) == 0
    r = json.loads((tmp_path / "ids" / "results.json").read_text())
    assert r["train_tokens"] == 396 * 16 and r["eval_sequences"] == 4
    assert row_align(f"ids:{tmp_path / 'rows.npy'}", 16) == 16


@pytest.mark.parametrize("make,extra,names", [
    (lambda d: None, [], ["not found"]),
    (lambda d: np.save(d / "rows.npy", _rows(400, 16, vocab=60000)), [], ["token id", "outside", "gpt2"]),
    (lambda d: np.save(d / "rows.npy", _rows(400, 16)), ["--data.tokenizer", "bpe:512"], ["already tokenised"]),
    (lambda d: np.save(d / "rows.npy", np.zeros((4, 4), dtype=np.float32)), [], ["must be integers"]),
])
def test_myopia_lm_bad_token_ids(tmp_path: Path, make, extra: list[str], names: list[str]) -> None:
    watch = tmp_path / "work"  # the data and run folders; the tokenizer cache (outside) may fill
    data = watch / "data"
    data.mkdir(parents=True)
    make(data)
    expect_clean_failure([*LM, "--data.corpus", f"ids:{data / 'rows.npy'}", "--run.out_dir", str(watch / "runs"),
                          "--data.cache_dir", str(tmp_path / "c"), *extra], tmp_path, watch, names)
