"""Corpora, tokenizers and token-array caching, all without network or the shared data folder.

The real-data checks at the end are marked ``data`` and run only when FORETHOUGHT_DATA points at the data root.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

from forethought.core.env import data_root, datasets_available, default_cache_dir
from forethought.core.errors import ForethoughtError
from forethought.data import tokenizers
from forethought.data.corpora import (
    KNOWN_CORPORA,
    encode_text,
    generated_corpus,
    load_corpus_text,
    token_array,
)
from forethought.data.tokenizers import gpt2_tiktoken_file, load_tokenizer

_USER_DATA_ROOT = os.environ.get("FORETHOUGHT_DATA")  # read before the fixtures below hide it


pytestmark = pytest.mark.usefixtures("isolated_env")  # conftest.py: no data root, no hub, a private cache


needs_gpt2_file = pytest.mark.skipif(
    gpt2_tiktoken_file() is None, reason="openai-whisper (gpt2.tiktoken) not installed"
)


# ---------------------------------------------------------------------------------------------- tokenizers


@needs_gpt2_file
def test_gpt2_ids_match_gpt2(cache: Path) -> None:
    tok = load_tokenizer("gpt2")
    assert tok("Hello world")["input_ids"] == [15496, 995]
    assert tok.eos_token == "<|endoftext|>" and tok.eos_token_id == 50256
    assert len(tok) == 50257
    assert (cache / "tokenizers" / "gpt2" / "tokenizer.json").is_file()
    text = "It's 2024:  naïve café \n\n\tdon't   stop 😀<|endoftext|>"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert tok("<|endoftext|>")["input_ids"] == [50256]


@needs_gpt2_file
def test_gpt2_agrees_with_tiktoken_on_generated_text() -> None:
    """tiktoken's own BPE over the same ranks file is the reference for GPT-2 ids."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(gpt2_tiktoken_file()))
    pattern = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    reference = tiktoken.Encoding("gpt2-local", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    text = generated_corpus(20_000, seed=3) + "\nSome 123,456 numbers & ÜñÎçødé!\n"
    assert load_tokenizer("gpt2")(text)["input_ids"] == reference.encode_ordinary(text)


def test_bpe_trains_and_reuses_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = load_corpus_text("generated", "train")
    t0 = time.perf_counter()
    tok = load_tokenizer("bpe:512", corpus_text=text, cache_dir=tmp_path)
    first = time.perf_counter() - t0
    assert tok.eos_token == "<|endoftext|>" and tok.eos_token_id == 0
    assert 257 <= len(tok) <= 512
    sample = "Anna went to the old harbour.\n\nZebras? ünïcode!"
    assert tok.decode(tok(sample)["input_ids"]) == sample  # byte-level: nothing is unknown
    cached = list(tmp_path.glob("bpe-512-*/tokenizer.json"))
    assert len(cached) == 1

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("BPE was retrained instead of loaded from the cache")

    monkeypatch.setattr(tokenizers, "train_byte_level_bpe", no_training)
    t0 = time.perf_counter()
    again = load_tokenizer("bpe:512", corpus_text=text, cache_dir=tmp_path)
    assert time.perf_counter() - t0 < max(first, 0.5)
    assert again(sample)["input_ids"] == tok(sample)["input_ids"]
    # A different corpus is a different cache entry.
    monkeypatch.undo()
    load_tokenizer("bpe:512", corpus_text=text + " extra words", cache_dir=tmp_path)
    assert len(list(tmp_path.glob("bpe-512-*/tokenizer.json"))) == 2


@pytest.mark.parametrize("spec", ["bpe:12", "bpe:abc", "bpe:"])
def test_bpe_bad_size(spec: str) -> None:
    with pytest.raises(ForethoughtError, match="bpe:<N>"):
        load_tokenizer(spec, corpus_text="some text")


def test_bpe_needs_corpus_text() -> None:
    with pytest.raises(ForethoughtError, match="no corpus text"):
        load_tokenizer("bpe:300")


def test_unknown_tokenizer_fails_fast_offline(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    with pytest.raises(ForethoughtError, match="no-such-org/no-such-tokenizer"):
        load_tokenizer("no-such-org/no-such-tokenizer")
    with pytest.raises(ForethoughtError, match="tokenizer"):
        load_tokenizer(str(tmp_path))  # an empty folder
    assert time.perf_counter() - t0 < 10


# ---------------------------------------------------------------------------------------------- corpora


def test_generated_corpus_is_deterministic() -> None:
    a = generated_corpus(50_000, seed=1)
    assert a == generated_corpus(50_000, seed=1)
    assert a != generated_corpus(50_000, seed=2)
    assert 45_000 < len(a) <= 50_000
    assert "\n\n" in a and a.count(".") > 300
    assert len(generated_corpus(100)) <= 100
    assert len(set(generated_corpus().split())) > 200  # a few hundred distinct words


def test_generated_splits() -> None:
    train, valid, test = (load_corpus_text("generated", s) for s in ("train", "valid", "test"))
    assert train + valid == generated_corpus()
    assert test == valid
    assert len(train) == int(0.9 * len(generated_corpus()))


def test_txt_path_corpus(tmp_path: Path) -> None:
    path = tmp_path / "story.txt"
    text = "".join(f"line {i} of the story\n" for i in range(100))
    path.write_text(text)
    train, valid, test = (load_corpus_text(str(path), s) for s in ("train", "valid", "test"))
    assert train + valid == text and test == valid
    assert len(train) == int(0.9 * len(text))
    with pytest.raises(ForethoughtError, match="not found"):
        load_corpus_text(str(tmp_path / "missing.txt"), "train")


def test_unknown_corpus_lists_known_names() -> None:
    with pytest.raises(ForethoughtError) as info:
        load_corpus_text("wikitext-1000", "train")
    for name in KNOWN_CORPORA:
        assert name in str(info.value)


def test_unknown_split() -> None:
    with pytest.raises(ForethoughtError, match="split"):
        load_corpus_text("generated", "validation")


@pytest.mark.parametrize("content", ["", "  \n\n\t \n"])
def test_empty_corpus(tmp_path: Path, content: str) -> None:
    path = tmp_path / "empty.txt"
    path.write_text(content)
    with pytest.raises(ForethoughtError, match="no text"):
        load_corpus_text(str(path), "train")


def test_non_utf8_corpus(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("café crème\n".encode("latin-1") * 10)
    with pytest.raises(ForethoughtError, match="UTF-8"):
        load_corpus_text(str(path), "train")


def test_data_root_without_wikitext(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORETHOUGHT_DATA", str(tmp_path))
    with pytest.raises(ForethoughtError) as info:
        load_corpus_text("wikitext-2", "train")
    message = str(info.value)
    assert str(tmp_path / "wikitext-2") in message
    assert "Salesforce/wikitext" in message and "FORETHOUGHT_DATA" in message
    assert "\n" not in message


def test_no_data_root() -> None:
    assert data_root() is None
    with pytest.raises(ForethoughtError, match="FORETHOUGHT_DATA is not set"):
        load_corpus_text("tinyshakespeare", "train")


def test_data_root_not_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORETHOUGHT_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(ForethoughtError, match="not a directory"):
        data_root()


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("FORETHOUGHT_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "forethought"


def _fake_data_root(root: Path) -> None:
    wiki = root / "wikitext-2"
    wiki.mkdir(parents=True)
    for split, n in (("train", 30), ("valid", 5), ("test", 4)):
        paragraphs = [f" = Heading {i} = \n \n The {split} paragraph {i} talks about things . \n \n" for i in range(n)]
        (wiki / f"{split}.txt").write_text("".join(paragraphs))
    (root / "tinystories").mkdir()
    (root / "tinystories" / "stories.txt").write_text("Once upon a time there was a cat.\n\n" * 50)


def test_known_corpora_from_data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_data_root(tmp_path)
    monkeypatch.setenv("FORETHOUGHT_DATA", str(tmp_path))
    assert "paragraph 3" in load_corpus_text("wikitext-2", "test")
    assert load_corpus_text("wikitext-2", "valid") == (tmp_path / "wikitext-2" / "valid.txt").read_text()
    stories = (tmp_path / "tinystories" / "stories.txt").read_text()
    assert load_corpus_text("tinystories", "train") + load_corpus_text("tinystories", "valid") == stories
    (tmp_path / "tinystories" / "more.txt").write_text("x")
    with pytest.raises(ForethoughtError, match=r"expected one \.txt"):
        load_corpus_text("tinystories", "train")


def _install_fake_datasets(monkeypatch: pytest.MonkeyPatch, splits: dict[str, list[str]] | Exception) -> list:
    """A stand-in `datasets` module: the hub code paths run without the package or network."""
    calls: list = []

    class FakeSplit:
        def __init__(self, rows: list[str]) -> None:
            self.rows = rows
            self.column_names = ["text"]

        def __getitem__(self, column: str) -> list[str]:
            return self.rows

    def load_dataset(dataset_id: str, config: str | None = None) -> dict[str, FakeSplit]:
        calls.append((dataset_id, config))
        if isinstance(splits, Exception):
            raise splits
        return {name: FakeSplit(rows) for name, rows in splits.items()}

    module = types.ModuleType("datasets")
    module.__spec__ = importlib.machinery.ModuleSpec("datasets", None)
    module.load_dataset = load_dataset  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", module)
    return calls


def test_hf_corpus_via_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _install_fake_datasets(monkeypatch, {"train": [f"row {i}" for i in range(100)]})
    train = load_corpus_text("hf:someone/texts:cfg", "train")
    valid = load_corpus_text("hf:someone/texts:cfg", "valid")
    assert calls == [("someone/texts", "cfg")]  # downloaded once per process
    assert train + valid == "\n".join(f"row {i}" for i in range(100))  # no valid split: 90/10 of train


def test_known_corpus_falls_back_to_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = {"train": [" = A = \n", " text . \n"], "validation": [" v . \n"], "test": [" t . \n"]}
    calls = _install_fake_datasets(monkeypatch, rows)
    assert load_corpus_text("wikitext-2", "valid") == " v . "
    assert calls == [("Salesforce/wikitext", "wikitext-2-v1")]


def test_hub_failure_names_both_places(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _install_fake_datasets(monkeypatch, ConnectionError("no route to host"))
    monkeypatch.setenv("FORETHOUGHT_DATA", str(tmp_path))
    with pytest.raises(ForethoughtError) as info:
        load_corpus_text("wikitext-2", "train")
    assert str(tmp_path / "wikitext-2") in str(info.value) and "Salesforce/wikitext" in str(info.value)
    assert "no route to host" in str(info.value)


@pytest.mark.skipif(datasets_available(), reason="the datasets package is installed here")
def test_hf_corpus_without_datasets_package() -> None:
    with pytest.raises(ForethoughtError, match="'datasets' package"):
        load_corpus_text("hf:someone/texts", "train")


# ---------------------------------------------------------------------------------------------- token arrays


@needs_gpt2_file
def test_token_array_is_cached_and_memory_mapped(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = token_array("generated", "valid", "gpt2", cache)
    assert first.dtype == np.uint16
    whole = load_tokenizer("gpt2")(load_corpus_text("generated", "valid"), verbose=False)["input_ids"]
    assert first.tolist() == whole  # chunked encoding == encoding the whole text
    assert len(list((cache / "tokens").glob("generated.valid.gpt2.*.npy"))) == 1

    def no_tokenizer(*args: object, **kwargs: object) -> None:
        raise AssertionError("token_array re-tokenised instead of using its cache")

    monkeypatch.setattr(tokenizers, "load_tokenizer", no_tokenizer)
    second = token_array("generated", "valid", "gpt2", cache)
    assert isinstance(second, np.memmap)
    np.testing.assert_array_equal(first, second)


def test_token_array_bpe_and_invalidation(tmp_path: Path) -> None:
    path = tmp_path / "corpus.txt"
    path.write_text(generated_corpus(30_000, seed=5))
    cache = tmp_path / "cache"
    a = token_array(str(path), "train", "bpe:400", cache)
    assert a.dtype == np.uint16 and a.size > 1000 and int(a.max()) < 400
    np.testing.assert_array_equal(a, token_array(str(path), "train", "bpe:400", cache))
    path.write_text(generated_corpus(30_000, seed=6))  # edited corpus: new key, new array
    b = token_array(str(path), "train", "bpe:400", cache)
    assert not np.array_equal(a[: min(a.size, b.size)], b[: min(a.size, b.size)])
    assert len(list((cache / "tokens").glob("*.npy"))) == 2


@needs_gpt2_file
def test_wikitext_documents_end_with_eos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    _fake_data_root(tmp_path)
    monkeypatch.setenv("FORETHOUGHT_DATA", str(tmp_path))
    ids = token_array("wikitext-2", "valid", "gpt2", cache)
    assert int((ids == 50256).sum()) == 10  # 5 headings + 5 paragraphs; blank lines dropped
    assert int(ids[-1]) == 50256
    tok = load_tokenizer("gpt2")
    first_doc = ids[: int(np.argmax(ids == 50256))]
    assert tok.decode(first_doc) == " = Heading 0 ="


def test_encode_text_uint32_for_large_vocab() -> None:
    class BigVocab:
        eos_token_id = 70_000

        def __len__(self) -> int:
            return 70_001

        def __call__(self, texts: list[str], **kwargs: object) -> dict[str, list[list[int]]]:
            return {"input_ids": [[69_999] * len(t.split()) for t in texts]}

    ids = encode_text("a b\n\nc\n", BigVocab(), documents=True)  # type: ignore[arg-type]
    assert ids.dtype == np.uint32 and ids.tolist() == [69_999, 69_999, 70_000, 69_999, 70_000]


# ---------------------------------------------------------------------------------------------- real data


def _real_root() -> Path:
    if not _USER_DATA_ROOT or not (Path(_USER_DATA_ROOT) / "wikitext-2" / "valid.txt").is_file():
        pytest.skip("set FORETHOUGHT_DATA to the benchmark data root to run the data tests")
    return Path(_USER_DATA_ROOT)


@pytest.mark.data
def test_real_corpora(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORETHOUGHT_DATA", str(_real_root()))
    valid = load_corpus_text("wikitext-2", "valid")
    assert len(valid.splitlines()) == 3760  # as listed in data/SOURCES.md
    shakespeare = load_corpus_text("tinyshakespeare", "train") + load_corpus_text("tinyshakespeare", "valid")
    assert len(shakespeare) == 1_115_394
    assert load_corpus_text("tinystories", "valid").strip()


@pytest.mark.data
@needs_gpt2_file
def test_real_wikitext_tokens(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    monkeypatch.setenv("FORETHOUGHT_DATA", str(_real_root()))
    ids = token_array("wikitext-2", "valid", "gpt2", cache)
    assert ids.dtype == np.uint16
    assert 240_000 < ids.size < 270_000  # about 1.17 GPT-2 tokens per WikiText word
