"""The planted corpus: exact likelihood and posteriors against brute force, the entropy floor against samples,
persistence and coherence on true and shuffled documents, config checks, and the PSF recipe on it."""

import itertools
import json
import math

import numpy as np
import pytest
import torch
from cli_harness import expect_clean_failure

from forethought import cli
from forethought.core.config import load_config
from forethought.core.errors import ForethoughtError
from forethought.data.corpora import eval_windows, random_windows
from forethought.data.planted import (
    PlantedConfig,
    block_coherence,
    build_generator,
    entropy_rate,
    joint_entropy,
    log_likelihood,
    persistence,
    planted_split,
    posterior_entropy,
    sample_documents,
    token_nll,
    topic_posteriors,
)
from forethought.psf.recipe import RecipeConfig

TINY = PlantedConfig(topics=3, vocab_size=4, topic_vocab=3, blocks=3, block_tokens=2, stay_prob=0.7,
                     concentration=0.5, smoothing=0.05, seed=3)


def brute_joint(gen, x):
    """p(x, z) for every topic sequence z, by the generator's definition (plain loops): dict z -> p."""
    K, n = gen.blocks, gen.block_tokens
    out = {}
    for z in itertools.product(range(gen.topics), repeat=K):
        p = gen.initial[z[0]] * np.prod([gen.transition[z[k - 1], z[k]] for k in range(1, K)])
        for k in range(K):
            b = x[k * n:(k + 1) * n]
            p *= gen.start[z[k], b[0]] * np.prod([gen.bigram[z[k], b[t - 1], b[t]] for t in range(1, n)])
        out[z] = p
    return out


def test_forward_and_posteriors_equal_brute_force_enumeration():
    gen = build_generator(TINY)
    docs = sample_documents(gen, 6, np.random.default_rng(0))[0]
    docs = np.concatenate([docs, [[3, 3, 0, 1, 2, 2]]])  # and one picked by hand
    post = topic_posteriors(gen, docs)
    for b, x in enumerate(docs):
        joint = brute_joint(gen, x)
        px = sum(joint.values())
        assert log_likelihood(gen, x[None])[0] == pytest.approx(math.log(px), abs=1e-10)
        assert post.log_px[b] == pytest.approx(math.log(px), abs=1e-10)
        gamma = np.zeros((3, 3))
        xi = np.zeros((2, 3, 3))
        for z, p in joint.items():
            for k in range(3):
                gamma[k, z[k]] += p / px
            for k in range(2):
                xi[k, z[k], z[k + 1]] += p / px
        np.testing.assert_allclose(post.topics[b], gamma, atol=1e-10, rtol=0)
        np.testing.assert_allclose(post.pairs[b], xi, atol=1e-10, rtol=0)
        h = -sum(p / px * math.log(p / px) for p in joint.values())
        assert posterior_entropy(gen, x[None])[0] == pytest.approx(h, abs=1e-10)
        keep = sum(p / px * np.mean([z[k] == z[k + 1] for k in range(2)]) for z, p in joint.items())
        assert persistence(gen, x[None])[0] == pytest.approx(keep, abs=1e-10)


def test_likelihood_normalises_and_entropies_are_exact_on_the_tiny_chain():
    gen = build_generator(TINY)
    every = np.array(list(itertools.product(range(4), repeat=6)))  # (4096, 6): every document
    log_p = log_likelihood(gen, every)
    p = np.exp(log_p)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    h_x = -(p * log_p).sum()
    # H(X, Z) by enumerating every (x, z): joint_entropy's closed form must equal it
    h_xz = 0.0
    for z in itertools.product(range(3), repeat=3):
        log_pz = np.log(gen.initial[z[0]]) + sum(np.log(gen.transition[z[k - 1], z[k]]) for k in (1, 2))
        blocks = every.reshape(-1, 3, 2)
        log_pxz = log_pz + sum(np.log(gen.start[z[k], blocks[:, k, 0]]) + np.log(gen.bigram[z[k], blocks[:, k, 0],
                               blocks[:, k, 1]]) for k in range(3))
        h_xz -= (np.exp(log_pxz) * log_pxz).sum()
    assert joint_entropy(gen) == pytest.approx(h_xz, abs=1e-10)
    assert joint_entropy(gen) - (p * posterior_entropy(gen, every)).sum() == pytest.approx(h_x, abs=1e-10)
    # coherence is a pointwise mutual information: its mean under the generator is >= 0
    assert (p * block_coherence(gen, every)).sum() > 0


def test_true_samples_score_the_entropy_rate_within_sampling_error():
    gen = build_generator(PlantedConfig())
    floor, se = entropy_rate(gen, n_documents=3000, seed=1)
    docs, _ = sample_documents(gen, 3000, np.random.default_rng(2))
    nll = token_nll(gen, docs)
    se_nll = nll.std(ddof=1) / math.sqrt(len(nll))
    assert abs(nll.mean() - floor) < 4 * math.hypot(se, se_nll), (nll.mean(), floor, se, se_nll)
    assert 1.0 < floor < math.log(gen.vocab_size)


def test_persistence_and_coherence_of_true_and_shuffled_documents():
    cfg = PlantedConfig()
    gen = build_generator(cfg)
    docs, topics = sample_documents(gen, 3000, np.random.default_rng(4))
    kept = persistence(gen, docs)
    assert abs(kept.mean() - cfg.stay_prob) < 4 * kept.std(ddof=1) / math.sqrt(len(kept))
    assert abs(np.mean(topics[:, 1:] == topics[:, :-1]) - cfg.stay_prob) < 0.02  # the sampler's own chain
    # each block position filled from a different random document: blocks independent, topics unrelated
    rng = np.random.default_rng(5)
    blocks = docs.reshape(len(docs), cfg.blocks, cfg.block_tokens)
    shuffled = np.stack([blocks[rng.permutation(len(docs)), k] for k in range(cfg.blocks)], 1).reshape(docs.shape)
    assert persistence(gen, shuffled).mean() < cfg.stay_prob - 0.4
    coherent, incoherent = block_coherence(gen, docs), block_coherence(gen, shuffled)
    assert coherent.mean() > 0.05
    assert incoherent.mean() < 4 * incoherent.std(ddof=1) / math.sqrt(len(incoherent))  # expectation <= 0


def test_splits_are_documents_and_seeded_per_split():
    cfg = PlantedConfig(train_documents=40, valid_documents=5, test_documents=5)
    train = planted_split(cfg, "train")
    assert train.dtype == np.uint16 and train.shape == (40 * 64,)
    again = planted_split(PlantedConfig(train_documents=40, valid_documents=9, test_documents=5), "train")
    assert np.array_equal(train, again)  # another split's size leaves this one unchanged
    assert not np.array_equal(planted_split(cfg, "valid"), planted_split(cfg, "test"))
    docs = train.reshape(40, 64)
    windows = random_windows(train, 30, 64, torch.Generator().manual_seed(0), align=64)
    assert all(any(np.array_equal(w, d) for d in docs) for w in windows.numpy())  # every window is a document
    assert torch.equal(eval_windows(train, 3, 64), torch.from_numpy(docs[:3].astype(np.int64)))
    gen = build_generator(cfg)
    with pytest.raises(ForethoughtError, match=r"token ids must be in 0\.\.63"):
        token_nll(gen, np.full((1, 64), 64))
    with pytest.raises(ForethoughtError, match=r"\(n, 64\) token arrays"):
        token_nll(gen, np.zeros((2, 32), dtype=np.int64))


@pytest.mark.parametrize("key,value,message", [
    ("topics", 1, "topics must be at least 2, got 1"),
    ("blocks", 1, "blocks must be at least 2, got 1"),
    ("topic_vocab", 100, r"topic_vocab \(100\) must not exceed vocab_size \(64\)"),
    ("stay_prob", 1.5, r"stay_prob must be in \[0, 1\], got 1.5"),
    ("concentration", 0, "concentration must be a number > 0, got 0"),
    ("smoothing", 0, r"smoothing must be in \(0, 1\]"),
    ("train_documents", 0, "train_documents must be at least 1, got 0"),
])
def test_bad_planted_settings_fail_when_the_config_loads(key, value, message):
    overrides = ["--data.corpus", "planted", "--model.seq_len", "64", "--model.blocks", "8",
                 "--longer_blocks.blocks", "[4]", f"--data.planted.{key}", str(value)]
    with pytest.raises(ForethoughtError, match=f"^data.planted: {message}"):
        load_config(RecipeConfig, cli.resolve_config_path("psf", "recipe", "tiny"), overrides)


def test_longer_blocks_must_be_whole_planted_blocks():
    overrides = ["--data.corpus", "planted", "--data.planted.blocks", "4", "--data.planted.block_tokens", "6",
                 "--model.seq_len", "24", "--longer_blocks.blocks", "[3]"]
    with pytest.raises(ForethoughtError, match=r"^longer_blocks\.blocks: K'=3 must divide data\.planted\.blocks"):
        load_config(RecipeConfig, cli.resolve_config_path("psf", "recipe", "tiny"), overrides)


PLANTED_TINY = ["--data.corpus", "planted", "--data.planted.blocks", "4", "--data.planted.block_tokens", "8",
                "--data.planted.vocab_size", "32", "--data.planted.topic_vocab", "12", "--data.planted.topics", "4",
                "--data.planted.train_documents", "256", "--data.planted.valid_documents", "32"]


def test_recipe_and_sample_on_the_planted_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    args = ["psf", "recipe", "--config", "tiny", "--run.out_dir", str(tmp_path), "--run.name", "pl",
            "--landing.enabled", "false", "--self_realized.enabled", "false", "--codes.enabled", "false",
            "--longer_blocks.blocks", "[]", *PLANTED_TINY]  # base -> prior -> ar: every kind of stage, seconds
    assert cli.main(args) == 0
    run = tmp_path / "pl"
    res = json.loads((run / "results.json").read_text())
    assert res["vocab_size"] == 32 and res["tokenizer"] == "token ids" and res["bos_id"] == 0
    assert set(res["stages"]) == {"base", "prior", "ar"}
    assert 0 < res["true_val_nll"] < res["stages"]["ar"]["val_ce"]  # a few steps do not reach the floor
    assert not (tmp_path / "cache").exists()  # nothing tokenised or cached
    assert cli.main(["psf", "sample", "--recipe_run", str(run), "--n", "3", "--prompt_blocks", "1"]) == 0
    rows = [json.loads(line) for line in (run / "samples" / "samples.jsonl").read_text().splitlines()]
    assert rows[0]["text"].count(" | ") == 3  # ids written block by block
    cfg = load_config(RecipeConfig, cli.resolve_config_path("psf", "recipe", "tiny"),
                      PLANTED_TINY)
    nll = token_nll(build_generator(cfg.data.planted), np.array([r["tokens"] for r in rows]))
    assert np.isfinite(nll).all()  # the judge scores any sample


def test_planted_shape_mismatch_and_text_commands_fail_cleanly(tmp_path):
    runs = tmp_path / "runs"
    expect_clean_failure(["psf", "recipe", "--config", "tiny", "--run.out_dir", str(runs), "--data.corpus",
                          "planted"], tmp_path, runs,
                         ["data.planted", "8 blocks of 8 tokens", "model.seq_len 64", "model.blocks 8", "32 and 4"])
    assert not runs.exists()
    assert cli.main(["myopia", "lm", "--config", "tiny", "--run.out_dir", str(runs), "--data.corpus", "planted"]) == 2
    assert not runs.exists()


def test_planted_preset_fits_the_corpus_and_sizes_the_ar_baseline_like_psf():
    """configs/psf/recipe_planted.yaml: whole planted documents as windows, every model stage but codes (kept off,
    README "What made the states matter"), and an AR baseline within 10 % of PSF encoder + decoder."""
    from forethought.psf.ar import build_ar
    from forethought.psf.build import build_psf
    from forethought.psf.recipe import plan_stages

    cfg = load_config(RecipeConfig, cli.resolve_config_path("psf", "recipe", "planted"))
    p = cfg.data.planted
    assert cfg.data.corpus == "planted" and (cfg.model.seq_len, cfg.model.blocks) == (p.document_tokens, p.blocks)
    assert [s.name for s in plan_stages(cfg)] == ["base", "landing", "self_realized", "prior", "ar"]
    n = build_psf(cfg.model, p.vocab_size, 0).num_params()
    ar = build_ar(cfg.ar.model, p.vocab_size, cfg.model.seq_len).num_params()
    assert abs(ar / (n["encoder"] + n["decoder"]) - 1) < 0.1
