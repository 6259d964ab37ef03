"""forethought.eval: detokenisation, references, judge gen-PPL / entropy / features, MAUVE, cost, curves.

Judges are tiny random HF models over a small BPE trained here, so nothing needs the network or SmolLM2.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerFast

from forethought.core.errors import ForethoughtError
from forethought.data.corpora import generated_corpus
from forethought.data.tokenizers import EOT, train_byte_level_bpe
from forethought.eval.cost import (
    analytic_flops,
    count_forward_calls,
    flops_per_document,
    matmul_params,
    measure_flops,
    samples_per_second,
)
from forethought.eval.curves import plot_entropy_curves, ppl_at_entropy
from forethought.eval.judge import (
    JudgePass,
    judge_texts,
    matched_length,
    mean_unigram_entropy,
    score_texts,
    start_token_id,
    unigram_entropy,
)
from forethought.eval.mauve import mauve_available, mauve_score, num_clusters
from forethought.eval.text import decode_samples, detokenize_wikitext, reference_windows
from forethought.models.gpt import GPT, GPTConfig
from forethought.testing import tiny_gpt2, tiny_llama

TEXTS = ["The cat sat on the mat.", "A story about a dog", "Once upon a time there was a small town by the sea.", "x"]


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerFast:
    backend = train_byte_level_bpe(generated_corpus(20_000, seed=1), 300)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOT, bos_token=EOT, unk_token=EOT,
                                   pad_token=EOT)


# ---------------------------------------------------------------------------------------------- text


@pytest.mark.parametrize("raw, clean", [
    ("a guest @-@ starring role", "a guest-starring role"),
    ("1 @,@ 000 people and 3 @.@ 5 m", "1,000 people and 3.5 m"),
    ("He said , \" hello there \" ( and left ) .", "He said, \"hello there\" (and left)."),
    ("Teddy 's Story ; they don 't know !", "Teddy's Story; they don't know!"),
    (" = = Career = = \n In 2004 <unk> landed . \n", "== Career ==\nIn 2004 <unk> landed.\n"),
])
def test_detokenize_wikitext(raw: str, clean: str) -> None:
    assert detokenize_wikitext(raw) == clean


def test_detokenize_unk_options() -> None:
    assert detokenize_wikitext("John <unk> , the actor") == "John <unk>, the actor"
    assert detokenize_wikitext("John <unk> , the actor", unk=None) == "John, the actor"
    assert detokenize_wikitext("John <unk> is", unk="X") == "John X is"


def test_decode_samples_eos_is_a_newline(tok) -> None:
    a, b = tok.encode("the cat , sat"), tok.encode(" on the mat")
    ids = torch.tensor([a + [tok.eos_token_id] + b])
    assert decode_samples(ids, tok) == ["the cat, sat\non the mat"]
    assert decode_samples(ids, tok, wikitext=False) == ["the cat , sat\n on the mat"]


def test_reference_windows(tok) -> None:
    text = "\n".join(f" line number {i} of the held out text ." for i in range(40))
    refs = reference_windows(text, tok, length=16, n=5)
    assert refs.shape == (5, 16) and refs.dtype == np.int64
    assert tok.eos_token_id in refs.ravel().tolist()  # documents are eos-separated, as in training data
    with pytest.raises(ForethoughtError):
        reference_windows(text, tok, length=16, n=10_000)


# ---------------------------------------------------------------------------------------------- entropy


def test_unigram_entropy_known_histograms() -> None:
    assert unigram_entropy([7, 7, 7, 7]) == 0.0
    assert unigram_entropy([1, 2, 3, 4]) == pytest.approx(math.log(4))
    assert unigram_entropy(torch.tensor([1, 1, 2, 2])) == pytest.approx(math.log(2))
    p = np.array([0.5, 0.25, 0.25])
    assert unigram_entropy([0, 0, 1, 2]) == pytest.approx(float(-(p * np.log(p)).sum()))
    assert unigram_entropy([]) == 0.0
    assert mean_unigram_entropy([[1, 1], [1, 2]]) == pytest.approx(math.log(2) / 2)


# ---------------------------------------------------------------------------------------------- judge


def _direct_gen_ppl(model, tok, texts) -> float:
    """Unbatched reference: start token + text tokens, every text token scored."""
    nll, n = 0.0, 0
    for text in texts:
        ids = [start_token_id(tok)] + tok(text, add_special_tokens=False)["input_ids"]
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = model(input_ids=x).logits[0, :-1].double()
        nll += F.cross_entropy(logits, x[0, 1:], reduction="sum").item()
        n += len(ids) - 1
    return math.exp(nll / n)


@pytest.mark.parametrize("build", [tiny_gpt2, tiny_llama])
def test_gen_ppl_matches_direct_computation(tok, build) -> None:
    model = build(vocab_size=len(tok), hidden_size=32, layers=2, heads=4)
    res = judge_texts(TEXTS, model, tok, batch_size=3)  # batches of unequal lengths: padding is exercised
    assert res.gen_ppl == pytest.approx(_direct_gen_ppl(model, tok, TEXTS), rel=1e-5)
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    assert res.n_tokens == sum(len(r) for r in ids)
    assert res.entropy == pytest.approx(np.mean([unigram_entropy(r) for r in ids]))
    assert res.features.shape == (len(TEXTS), 32) and res.features.dtype == np.float32
    # "last" features = the judge's final hidden state at each text's last token, whatever the batching
    one = judge_texts(TEXTS[:1], model, tok)
    np.testing.assert_allclose(one.features[0], res.features[0], atol=1e-5)
    mean = judge_texts(TEXTS, model, tok, pooling="mean", batch_size=3)
    assert mean.gen_ppl == pytest.approx(res.gen_ppl) and not np.allclose(mean.features, res.features)


def test_uniform_judge_has_ppl_vocab_size(tok) -> None:
    model = tiny_llama(vocab_size=len(tok), hidden_size=32, layers=1, heads=4)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # logits all 0: the uniform distribution over the vocabulary
    assert judge_texts(TEXTS, model, tok).gen_ppl == pytest.approx(len(tok), rel=1e-6)


def test_max_tokens_truncates_and_matched_length(tok) -> None:
    model = tiny_gpt2(vocab_size=len(tok), hidden_size=32, layers=1, heads=4)
    n = matched_length(tok, TEXTS[:3], TEXTS[:2])
    assert n == min(len(tok(t, add_special_tokens=False)["input_ids"]) for t in TEXTS[:3])
    res = judge_texts(TEXTS[:3], model, tok, max_tokens=n)
    assert res.n_tokens == 3 * n
    with pytest.raises(ForethoughtError):
        judge_texts(["word " * 600], model, tok)  # longer than the judge's 512 positions
    empty = judge_texts(["", TEXTS[0]], model, tok)  # an empty sample scores nothing but keeps its row
    assert np.isnan(empty.nll_per_token[0]) and empty.features.shape[0] == 2
    no_start = judge_texts(TEXTS, model, tok, prepend_start=False)  # then first tokens are not scored
    assert no_start.n_tokens == sum(len(tok(t, add_special_tokens=False)["input_ids"]) - 1 for t in TEXTS)


def test_one_pass_serves_every_cap_and_survives_a_cache(tok, tmp_path) -> None:
    """A full-length pass cut afterwards equals a pass over the cut texts (the judge is causal), for both
    poolings, with and without a start token; the pass saves and loads exactly; a corrupt cache is an error."""
    model = tiny_llama(vocab_size=len(tok), hidden_size=32, layers=2, heads=4)
    texts = TEXTS + [""]
    for start in (True, False):
        full = score_texts(texts, model, tok, batch_size=2, prepend_start=start)
        for cap in (3, 7, None):
            for pooling in ("last", "mean"):
                a = full.result(cap, pooling)
                b = judge_texts(texts, model, tok, max_tokens=cap, batch_size=3, pooling=pooling,
                                prepend_start=start)
                assert a.n_tokens == b.n_tokens and a.gen_ppl == pytest.approx(b.gen_ppl, rel=1e-6)
                np.testing.assert_allclose(a.features, b.features, atol=1e-5)
                np.testing.assert_allclose(a.entropies, b.entropies)
        full.save(tmp_path / "pass.safetensors")
        back = JudgePass.load(tmp_path / "pass.safetensors")
        assert back.ids == full.ids and back.start == full.start
        r1, r2 = full.result(5), back.result(5)
        assert r1.gen_ppl == r2.gen_ppl and np.array_equal(r1.features, r2.features)
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ForethoughtError, match="judge cache"):
        JudgePass.load(tmp_path / "bad.safetensors")


# ---------------------------------------------------------------------------------------------- MAUVE


@pytest.mark.skipif(not mauve_available(), reason="mauve-text not installed")
def test_mauve_identical_high_separated_low() -> None:
    rng = np.random.default_rng(0)
    p = rng.normal(size=(60, 8)).astype(np.float32)
    assert mauve_score(p, p.copy(), seed=1) > 0.95
    assert mauve_score(p, p + 20.0, seed=1) < 0.1
    assert num_clusters(60, 500) == 6 and num_clusters(5, 5) == 2


# ---------------------------------------------------------------------------------------------- cost


def test_flop_counter_linear_layer() -> None:
    lin = torch.nn.Linear(12, 7)
    flops, out = measure_flops(lin, torch.randn(5, 12))
    assert flops == 2 * 12 * 7 * 5 and out.shape == (5, 7)
    assert flops_per_document(lambda n: lin(torch.randn(n, 12)), n_docs=5) == 2 * 12 * 7


def test_measured_flops_match_analytic_for_full_attention_gpt() -> None:
    cfg = GPTConfig(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4, attention="full")
    model = GPT(cfg)
    flops, _ = measure_flops(model, torch.randint(0, 50, (2, 16)))
    per_doc = analytic_flops(matmul_params(model), tokens=16, n_layer=2, d_model=32)
    assert flops == 2 * per_doc  # the CPU fused attention kernel is counted too
    assert analytic_flops(10, 4) == 80


def test_serial_depth_and_throughput() -> None:
    lin = torch.nn.Linear(4, 4)

    def sample(n: int) -> torch.Tensor:
        x = torch.zeros(n, 4)
        for _ in range(3):  # three sequential evaluations, whatever the batch size
            x = lin(x)
        return x

    with count_forward_calls(lin) as calls:
        sample(8)
    assert calls[0] == 3
    rates = samples_per_second(sample, [1, 4])
    assert set(rates) == {1, 4} and all(r > 0 for r in rates.values())


# ---------------------------------------------------------------------------------------------- curves


def test_ppl_at_entropy_interpolates_in_log_space() -> None:
    pts = [(5.0, 100.0), (4.0, 10.0), (6.0, 400.0)]
    assert ppl_at_entropy(pts, 4.5) == pytest.approx(math.sqrt(10 * 100))
    assert ppl_at_entropy(pts, 5.0) == pytest.approx(100.0)
    assert ppl_at_entropy(pts, 3.9) is None and ppl_at_entropy(pts, 6.1) is None
    assert ppl_at_entropy([(4.0, 10.0)], 4.5) is None


def test_plot_entropy_curves_writes_png(tmp_path: Path) -> None:
    curves = {"ar": [(4.0, 20.0), (5.0, 40.0)], "flow": [(4.5, 80.0), (5.5, 200.0)], "short": [(3.0, 9.0)]}
    path = plot_entropy_curves(curves, tmp_path / "curves.png", target_entropy=4.8, judge="tiny")
    assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------- real judge


@pytest.mark.slow
def test_smollm2_judge_prefers_real_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from forethought.eval.judge import load_judge

    monkeypatch.setenv("FORETHOUGHT_CACHE", os.environ.get("FORETHOUGHT_CACHE") or str(tmp_path / "cache"))
    model, judge_tok = load_judge()
    assert start_token_id(judge_tok) == judge_tok.get_vocab()["<|endoftext|>"]  # not the chat bos <|im_start|>
    text = detokenize_wikitext("The city 's population grew rapidly during the 19th century , and a new railway "
                               "station was opened in 1850 to serve the growing number of workers .")
    words = text.split()
    shuffled = " ".join(words[i] for i in np.random.default_rng(0).permutation(len(words)))
    real, noise = judge_texts([text], model, judge_tok), judge_texts([shuffled], model, judge_tok)
    assert real.gen_ppl < 100 < noise.gen_ppl
    assert real.features.shape == (1, model.config.hidden_size)
