"""The myopia paper presets against their tables in docs/myopia.md (setting, the paper's or reference code's value,
ours, source, why ours differs), and the passage reader that `lm_paper` trains on (MS MARCO as the paper cut it),
on small local files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from cli_harness import expect_clean_failure

from forethought.cli import main
from forethought.core.config import load_config
from forethought.core.errors import ForethoughtError
from forethought.data.corpora import PASSAGE_ORDER_SEED, passage_sequences, passage_texts
from forethought.data.tokenizers import load_tokenizer
from forethought.myopia.config import LMConfig, SyntheticConfig
from forethought.myopia.lm import passage_batch

ROOT = Path(__file__).resolve().parents[1]
PRESETS = {"synthetic_paper": SyntheticConfig, "lm_paper": LMConfig}


def _table(preset: str) -> list[list[str]]:
    """The rows of the docs' table under '### `<preset>`' (cells stripped), without the header."""
    text = (ROOT / "docs" / "myopia.md").read_text()
    section = text.split(f"### `{preset}`", 1)[1].split("\n\n", 2)[1]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()]
    return [r for r in rows[2:] if len(r) == 5]


def _value(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


@pytest.mark.parametrize("preset,cls", PRESETS.items())
def test_paper_preset_is_its_docs_table(preset: str, cls: type) -> None:
    cfg = load_config(cls, ROOT / "src" / "forethought" / "configs" / "myopia" / f"{preset}.yaml")
    rows = _table(preset)
    assert len(rows) >= 15
    for setting, reference, ours, source, why in rows:
        key = re.fullmatch(r"`([\w.]+)`", setting)
        assert key, f"{preset}: a row's setting must be a config key: {setting}"
        expected, actual = yaml.safe_load(ours), _value(cfg, key.group(1))
        assert actual == (pytest.approx(expected) if isinstance(expected, float) else expected), (preset, setting)
        assert source, (preset, setting)
        if yaml.safe_load(reference) != expected:
            assert why, f"{preset}: {setting} differs from the reference ({reference} vs {ours}) without a why"


def _passages(n: int) -> list[str]:
    """Passages of varied length: every third one too short for 8 tokens."""
    words = "the quick brown fox jumps over lazy dogs near river banks while birds sing".split()
    return [" ".join(words[(i % 7):(i % 7) + (3 if i % 3 == 0 else 9 + i % 5)]) + f" number {i}." for i in range(n)]


@pytest.mark.parametrize("kind", ["jsonl", "tsv", "txt"])
def test_passages_are_each_passages_first_tokens_in_the_references_order(tmp_path: Path, kind: str) -> None:
    texts = _passages(300)
    path = tmp_path / f"collection.{kind}"
    lines = {"jsonl": [json.dumps({"_id": str(i), "title": "", "text": t}) for i, t in enumerate(texts)],
             "tsv": [f"{i}\t{t}" for i, t in enumerate(texts)], "txt": texts}[kind]
    path.write_text("\n".join(lines) + "\n")
    assert passage_texts(str(path)) == texts
    train, valid = passage_sequences(str(path), "gpt2", tmp_path / "cache", 8)
    # the expectation, built independently: shuffle as datasets' shuffle(seed=1729) does, encode each passage,
    # keep those with at least 8 tokens, cut to 8, then 90 % train and the next 1 % valid
    tok = load_tokenizer("gpt2")
    order = np.random.default_rng(PASSAGE_ORDER_SEED).permutation(len(texts))
    encoded = [tok(texts[i])["input_ids"] for i in order]
    kept = [ids[:8] for ids in encoded if len(ids) >= 8]
    assert 0 < len(kept) < len(texts)  # some passages are dropped for being short
    n_train = int(0.9 * len(kept))
    assert train.tolist() == kept[:n_train]
    assert valid.tolist() == kept[n_train:n_train + max(1, int(0.01 * len(kept)))]
    # one ordered pass: step s reads rows s·B .. (s+1)·B − 1
    assert passage_batch(train, 3, 16).tolist() == kept[48:64]


def test_msmarco_reads_the_data_root_and_says_where_to_place_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FORETHOUGHT_DATA", str(tmp_path))
    monkeypatch.setattr("forethought.data.corpora.hub_dataset_unavailable_reason", lambda: "offline for the test")
    with pytest.raises(ForethoughtError, match=r"msmarco/collection.tsv or msmarco/corpus.jsonl.*<FORETHOUGHT_DATA>"):
        passage_texts("msmarco")
    (tmp_path / "msmarco").mkdir()
    (tmp_path / "msmarco" / "corpus.jsonl").write_text(json.dumps({"_id": "1", "text": "a passage"}) + "\n")
    assert passage_texts("msmarco") == ["a passage"]


def test_lm_trains_on_passages_in_one_ordered_pass(tmp_path: Path) -> None:
    path = tmp_path / "passages.txt"
    path.write_text("\n".join(_passages(400)) + "\n")
    common = ["myopia", "lm", "--config", "tiny", "--data.corpus", str(path), "--data.sequences", "passages",
              "--data.seq_len", "8", "--data.tokenizer", "gpt2", "--data.cache_dir", str(tmp_path / "cache"),
              "--data.eval_sequences", "2", "--data.curve_sequences", "2", "--variants", "[vanilla]",
              "--train.batch_size", "16", "--run.out_dir", str(tmp_path / "runs")]
    train, _ = passage_sequences(str(path), "gpt2", tmp_path / "cache", 8)
    too_many = len(train) // 16 + 1
    (tmp_path / "runs").mkdir()
    expect_clean_failure([*common, "--train.steps", str(too_many), "--run.name", "long"], tmp_path, tmp_path / "runs",
                         [f"{len(train)} training passages", f"one pass is at most {too_many - 1} steps of 16"])
    assert main([*common, "--train.steps", "3", "--run.name", "ok"]) == 0
    res = json.loads((tmp_path / "runs" / "ok" / "results.json").read_text())
    assert res["sequences"] == "passages" and res["epochs"] == pytest.approx(3 * 16 / len(train))
    assert len(res["variants"]["vanilla"]["per_position"]) == 7  # 8 tokens: 7 predictions each
    assert torch.isfinite(torch.tensor(res["variants"]["vanilla"]["val_loss"]))
