"""Predictive State Flow: masks, the state shift, landing-target alignment, flow prior, sampler, KV cache, CLI."""

import copy
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch
from cli_harness import snapshot
from safetensors.torch import load_file

from forethought import cli
from forethought.core.checkpoint import latest_checkpoint
from forethought.core.errors import ForethoughtError
from forethought.models.gpt import GPT, GPTConfig
from forethought.psf.ar import ARModelConfig, build_ar, sample_ar
from forethought.psf.config import StageFeatures
from forethought.psf.generate import load_recipe, sample_psf
from forethought.psf.model import (
    PSFModel,
    PSFModelConfig,
    calibrate_states,
    drop_codes,
    generate_blocks,
    kl_free_bits,
    mix_states,
    realized_summaries,
    start_codes,
)
from forethought.psf.prior import (
    FlowPrior,
    PriorConfig,
    euler_step,
    flow_loss,
    interpolate,
    logit_normal_t,
    sample_prior,
)
from forethought.psf.recipe import evaluate_psf
from forethought.psf.sampling import sample_tokens, top_p_probs

V = 23


def tiny_psf(states: str = "predictive", pool: str = "mean", seed: int = 0) -> PSFModel:
    torch.manual_seed(seed)
    m = PSFModel(PSFModelConfig(vocab_size=V, seq_len=12, blocks=4, n_embd=16, enc_layers=2, dec_layers=2,
                                n_head=2, code_dim=4, states=states, pool=pool)).double()
    with torch.no_grad():  # the landing / code layers start at zero; give them values so the tests can see them
        for mod in (m.land_proj, m.code_in, m.code_head):
            mod.weight.normal_(0, 0.3)
        m.land_none.normal_(0, 0.3)
    return m.eval()


# ---- encoder: mask and state shift -------------------------------------------------------------------------

@pytest.mark.parametrize("pool,train", [("mean", False), ("last", False), ("mean", True)])
def test_predictive_state_never_sees_its_own_block(pool, train):
    """In training mode the states are standardised with batch statistics: s_k still reads no block >= k of
    any sequence in the batch (the statistics are per block index)."""
    m = tiny_psf(pool=pool).train(train)
    tokens = torch.randint(0, V, (3 if train else 2, 12))
    emb = m.encoder.wte(tokens).detach().requires_grad_(True)  # (B, L, d)
    s = m.states_from(m.encode(None, embeds=emb)[0])  # (B, K, S)
    n = m.block_len
    for k in range(m.blocks):
        (g,) = torch.autograd.grad(s[:, k].sum(), emb, retain_graph=True)
        assert torch.all(g[:, k * n:] == 0), f"s_{k + 1} depends on block {k + 1} or later"
        if k > 0:
            assert g[:, (k - 1) * n:k * n].abs().sum() > 0  # but it does read the previous block
    torch.testing.assert_close(s[:, 0], m.start.expand(len(tokens), -1))


def test_state_norm_batch_statistics_running_estimates_and_off():
    from forethought.psf.model import StateNorm

    norm = StateNorm(5, 4, momentum=0.5)
    h = torch.randn(64, 3, 5) * 3 + 7  # (B, K, S): a large shared component
    out = norm(h)  # training: the batch's own statistics per block index
    torch.testing.assert_close(out.mean(0), torch.zeros(3, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(0, unbiased=False), torch.ones(3, 5), atol=1e-3, rtol=0)
    torch.testing.assert_close(norm.running_mean[:3], h.mean(0))  # the first batch sets the estimates
    assert torch.all(norm.running_mean[3] == 0)  # an index that was never seen keeps its initial value
    h2 = torch.randn(64, 3, 5) + 1
    norm(h2)
    torch.testing.assert_close(norm.running_mean[:3], 0.5 * h.mean(0) + 0.5 * h2.mean(0))
    one = norm(h2[:1])  # a batch of one has no spread: the running estimates are used
    torch.testing.assert_close(one, (h2[:1] - norm.running_mean[:3]) / (norm.running_var[:3] + 1e-5).sqrt())
    norm.eval()
    before = norm.running_mean.clone()
    torch.testing.assert_close(norm(h), (h - before[:3]) / (norm.running_var[:3] + 1e-5).sqrt())
    assert torch.equal(norm.running_mean, before)  # evaluation leaves the estimates alone
    m = tiny_psf().train()  # calibration: the running estimates become the exact statistics of the windows
    windows = torch.randint(0, V, (40, 12))
    calibrate_states(m, windows, batch=16)
    assert m.training and m.state_norm.training  # modes restored
    s = m.eval().encode(windows)[0]  # (40, K, S) standardised with the calibrated estimates
    raw = m.summaries(windows)[0]
    torch.testing.assert_close(s, (raw - raw.mean(0)) / (raw.var(0, unbiased=False) + 1e-5).sqrt())
    off = PSFModel(PSFModelConfig(vocab_size=V, seq_len=12, blocks=4, n_embd=16, enc_layers=1, dec_layers=1,
                                  n_head=2, state_norm="none"))
    assert isinstance(off.state_norm, torch.nn.Identity)


def test_content_states_see_their_own_block():
    m = tiny_psf(states="content")
    emb = m.encoder.wte(torch.randint(0, V, (1, 12))).detach().requires_grad_(True)
    s = m.states_from(m.encode(None, embeds=emb)[0])
    n = m.block_len
    for k in range(m.blocks):
        (g,) = torch.autograd.grad(s[:, k].sum(), emb, retain_graph=True)
        assert g[:, k * n:(k + 1) * n].abs().sum() > 0
        assert torch.all(g[:, (k + 1) * n:] == 0)


# ---- decoder: branches, landing targets, training == sampling ---------------------------------------------

def test_branch_reads_only_states_up_to_its_block():
    m = tiny_psf()
    tokens = torch.randint(0, V, (2, 12))
    s = torch.randn(2, 4, m.state_dim, dtype=torch.float64)
    base = m.decode_logits(tokens, s)
    s2 = s.clone()
    s2[:, 2] += 1.0  # only branches 3 and 4 may react
    changed = m.decode_logits(tokens, s2)
    torch.testing.assert_close(changed[:, :2], base[:, :2])
    assert not torch.allclose(changed[:, 2], base[:, 2])


def test_landing_target_conditioning():
    m = tiny_psf()
    m.configure(StageFeatures(landing=True))
    tokens = torch.randint(0, V, (1, 12))
    s = torch.randn(1, 4, m.state_dim, dtype=torch.float64)
    base = m.decode_logits(tokens, s)  # (B, K, n, V)
    t2 = tokens.clone()
    t2[0, 3] = (t2[0, 3] + 1) % V  # first token of block 2
    out = m.decode_logits(t2, s)
    torch.testing.assert_close(out[:, 0, 0], base[:, 0, 0])  # step 1 of branch 1: no landing yet
    assert not torch.allclose(out[:, 0, 1:], base[:, 0, 1:])  # steps 2.. of branch 1 land on it
    torch.testing.assert_close(out[:, 2:], base[:, 2:])
    t3 = tokens.clone()
    t3[0, 4] = (t3[0, 4] + 1) % V  # second token of block 2: invisible to branch 1
    torch.testing.assert_close(m.decode_logits(t3, s)[:, 0], base[:, 0])


@pytest.mark.parametrize("landing,codes,enters", [(False, False, "query"), (True, False, "query"),
                                                  (True, True, "query"), (True, True, "inputs")])
def test_training_logits_equal_sampling_logits(landing, codes, enters):
    """Teacher-forced training sees exactly what the KV-cached parallel sampler feeds (landing = the next
    branch's step-1 token; with ``code_enters inputs`` the code at every input position too)."""
    m = tiny_psf()
    m.config.code_enters = enters
    m.configure(StageFeatures(landing=landing, codes=codes))
    tokens = torch.randint(0, V, (3, 12))
    s = m.states(tokens)
    c = torch.randn(3, 4, 4, dtype=torch.float64) if codes else None
    train_logits = m.decode_logits(tokens, s, c)
    ids, sample_logits = generate_blocks(m, s, c, force=tokens, return_logits=True)
    assert torch.equal(ids, tokens)
    torch.testing.assert_close(sample_logits, train_logits, rtol=1e-10, atol=1e-10)
    # free sampling: landing embeddings come from what the next branch produced at its step 1
    g = torch.Generator().manual_seed(0)
    free, free_logits = generate_blocks(m, s, c, generator=g, return_logits=True)
    torch.testing.assert_close(m.decode_logits(free, s, c), free_logits, rtol=1e-10, atol=1e-10)


def test_forward_loss_codes_kl_and_self_realized():
    m = tiny_psf().float()
    m.train()
    m.configure(StageFeatures(landing=True, codes=True))
    tokens = torch.randint(0, V, (2, 12))
    mu, logvar = m.posterior(m.encode(tokens)[1])
    per_block = (0.5 * (mu.pow(2) + logvar.exp() - 1 - logvar).sum(-1)).mean(0).detach()  # (K,) batch-mean KL
    assert per_block.min() > 0
    # loss = CE + kl_weight · sum_k max(KL_k, free_bits · n) / L, and "kl" reports the raw KL per token
    m.config.kl_weight, m.config.free_bits = 2.0, 0.0  # no free bits: the whole KL is charged
    out = m(tokens)
    torch.testing.assert_close(out["kl"], per_block.sum() / 12)
    torch.testing.assert_close(out["loss"] - out["ce"], 2.0 * per_block.sum() / 12)
    m.config.free_bits = float(per_block.max()) + 1.0  # every block under budget: charged its free bits only
    out = m(tokens)
    assert (out["loss"] - out["ce"]).item() == pytest.approx(2.0 * m.config.free_bits * 3 * 4 / 12)  # K·n / L
    torch.testing.assert_close(out["kl"], per_block.sum() / 12)
    out["loss"].backward()
    assert m.code_head.weight.grad is not None
    real = realized_summaries(m, tokens, generator=torch.Generator().manual_seed(1))
    assert real.shape == (2, 4, m.state_dim) and real.requires_grad
    assert torch.isfinite(m(tokens, realized=real)["loss"])


def test_realized_summaries_are_standardised_with_the_clean_batch_statistics():
    """Issue 14: the rollout's re-encoded summaries are standardised with the clean batch's mean and variance
    (not their own), and only the clean pass moves the running estimates."""
    m = tiny_psf().train()
    m.configure(StageFeatures(landing=True))
    tokens = torch.randint(0, V, (6, 12))
    fresh = copy.deepcopy(m)
    real = realized_summaries(m, tokens, generator=torch.Generator().manual_seed(1))
    assert torch.equal(m.state_norm.running_mean, fresh.state_norm.running_mean)  # the rollout updates nothing
    assert int(m.state_norm.updates) == 0
    out = m(tokens, realized=real, mix_prob=1.0)  # every block takes its realized state
    fresh(tokens)  # the clean pass alone
    for name in ("running_mean", "running_var", "updates"):
        assert torch.equal(getattr(m.state_norm, name), getattr(fresh.state_norm, name)), name
    raw = m.summaries(tokens)[0]  # dropout 0: the forward's clean summaries
    mean, var = raw.mean(0), raw.var(0, unbiased=False)
    expect = m.states_from((real - mean) / (var + m.state_norm.eps).sqrt())
    torch.testing.assert_close(out["states"], expect, rtol=1e-12, atol=1e-12)
    # the rollout's gradient still reaches the encoder through the re-encoding of the generated text
    m.zero_grad()
    (g,) = torch.autograd.grad(out["loss"], [real])
    assert g.abs().sum() > 0
    real.backward(g)
    assert m.encoder.wte.weight.grad.abs().sum() > 0


def test_generated_text_shifted_from_real_text_keeps_its_shift():
    """Summaries of generated text shifted by a constant from the clean ones: standardised with their own batch
    statistics (the bug) the shift vanishes; with the clean batch's it stays, divided by the clean spread."""
    m = tiny_psf().train()
    tokens = torch.randint(0, V, (8, 12))
    raw = m.summaries(tokens)[0].detach()
    shift = torch.linspace(-2.0, 3.0, m.state_dim, dtype=raw.dtype)
    clean, shifted = m.normalise(raw, raw + shift)
    sd = (raw.var(0, unbiased=False) + m.state_norm.eps).sqrt()
    torch.testing.assert_close(shifted - clean, (shift / sd).expand_as(clean), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(shifted.mean(0), shift / sd, rtol=1e-10, atol=1e-10)  # clean's mean is 0
    own = m.state_norm(raw + shift)  # what the old code did: the shift is gone
    torch.testing.assert_close(own, clean, rtol=1e-8, atol=1e-8)
    out = m(tokens, realized=raw + shift, mix_prob=1.0)
    torch.testing.assert_close(out["states"][:, 1:], (clean + shift / sd)[:, :-1], rtol=1e-10, atol=1e-10)
    m.eval()  # at evaluation both use the running estimates
    clean, shifted = m.normalise(raw, raw + shift)
    torch.testing.assert_close(shifted - clean, (shift / (m.state_norm.running_var[:4] + 1e-5).sqrt()).expand_as(clean))


@pytest.mark.parametrize("kind", ["mask", "random"])
def test_input_dropout_replaces_the_expected_fraction_in_training_only(kind):
    """model.input_dropout p: in training each decoder input token is replaced (by the learned mask vector, or a
    uniform random token) with probability p; at evaluation (and so in sampling) the decoder reads every token."""
    torch.manual_seed(0)
    cfg = PSFModelConfig(vocab_size=V, seq_len=12, blocks=4, n_embd=16, enc_layers=1, dec_layers=1, n_head=2,
                         code_dim=4, input_dropout=0.3, input_dropout_with=kind)
    m = PSFModel(cfg).double().train()
    assert (m.input_mask is not None) == (kind == "mask")
    if kind == "mask":
        assert "input_mask" in m.state_dict() and torch.all(m.input_mask == 0)  # starts at zero
        with torch.no_grad():
            m.input_mask.fill_(7.0)  # unlike any token embedding
    tok = torch.randint(0, V, (400, 4, 50))
    emb, clean = m.input_embeds(tok), m.decoder.wte(tok)
    changed = (emb != clean).any(-1).double().mean().item()
    if kind == "mask":
        dropped = (emb == 7.0).all(-1)
        assert torch.equal(dropped, (emb != clean).any(-1))  # a token is either kept or exactly the mask
        assert changed == pytest.approx(0.3, abs=0.01)
    else:  # a random token equals the original one 1/V of the time
        assert changed == pytest.approx(0.3 * (1 - 1 / V), abs=0.01)
    assert not torch.equal(m.input_embeds(tok), emb)  # fresh draws each call
    m.eval()
    assert torch.equal(m.input_embeds(tok), clean)
    tokens = torch.randint(0, V, (3, 12))
    s = m.states(tokens)
    plain = PSFModel(dataclasses.replace(cfg, input_dropout=0.0)).double().eval()  # same weights, no dropout
    plain.load_state_dict({k: v for k, v in m.state_dict().items() if k != "input_mask"}, strict=True)
    torch.testing.assert_close(m.decode_logits(tokens, s), plain.decode_logits(tokens, s), rtol=0, atol=0)
    # training: the loss still targets the real tokens and, with a mask, trains the mask vector
    m.train()
    out = m(tokens)
    out["loss"].backward()
    assert torch.isfinite(out["loss"])
    if kind == "mask":
        assert m.input_mask.grad.abs().sum() > 0


def test_input_dropout_off_by_default_and_validated():
    m = tiny_psf()
    assert m.config.input_dropout == 0 and m.input_mask is None and "input_mask" not in m.state_dict()
    with pytest.raises(ForethoughtError, match=r"input_dropout must be in \[0, 1\)"):
        PSFModelConfig(vocab_size=V, seq_len=12, blocks=4, input_dropout=1.0).validate()


def test_kl_free_bits_and_state_mixing():
    mu, logvar = torch.zeros(3, 4, 2), torch.zeros(3, 4, 2)
    term, raw = kl_free_bits(mu, logvar, budget=0.5)
    assert raw == 0 and term == pytest.approx(4 * 0.5)  # each of 4 blocks charged its free budget
    mu[:, 1] = 3.0  # block 2: 0.5·(9+9) = 9 nats > budget
    term, raw = kl_free_bits(mu, logvar, budget=0.5)
    assert raw == pytest.approx(9.0) and term == pytest.approx(9.0 + 3 * 0.5)
    clean, real = torch.zeros(5, 4, 3), torch.ones(5, 4, 3)
    assert torch.equal(mix_states(clean, real, 0.0), clean) and torch.equal(mix_states(clean, real, 1.0), real)
    mixed = mix_states(clean, real, 0.5, torch.Generator().manual_seed(0))
    assert 0 < mixed.mean() < 1 and torch.all(mixed.std(-1) == 0)  # whole blocks are swapped


# ---- rectified-flow prior ----------------------------------------------------------------------------------

def test_flow_loss_zero_for_true_x_and_time_samples():
    x, noise = torch.randn(6, 4, 3), torch.randn(6, 4, 3)
    t = torch.tensor([0.01, 0.3, 0.5, 0.9, 0.97, 0.999999])  # includes 1 - t below the 0.05 clamp
    x_t = interpolate(x, noise, t)
    assert flow_loss(x, x, x_t, t) == 0
    assert flow_loss(x + 0.1, x, x_t, t) > 0
    c = (1 - t[:3]).view(-1, 1, 1)
    torch.testing.assert_close((x[:3] - x_t[:3]) / c, x[:3] - noise[:3])  # v = x - noise above the clamp
    ts = logit_normal_t(10_000, 0.0, 1.0, generator=torch.Generator().manual_seed(0))
    assert ts.min() > 0 and ts.max() < 1 and abs(ts.median() - 0.5) < 0.02
    ts = logit_normal_t(10_000, 1.0, 1.0, generator=torch.Generator().manual_seed(0))
    assert abs(ts.median() - torch.sigmoid(torch.tensor(1.0))) < 0.02


def test_euler_with_exact_predictor_lands_on_the_data_point():
    x = torch.randn(1, 4, 3)
    z = torch.randn(1, 4, 3)
    steps = 7
    for i in range(steps):
        z = euler_step(z, x, i / steps, 1 / steps)
    torch.testing.assert_close(z, x)


def test_prior_network_sampling_and_standardisation():
    torch.manual_seed(0)
    prior = FlowPrior(PriorConfig(n_embd=16, n_layer=1, n_head=2, steps=5), dim=3, blocks=4)
    data = torch.randn(50, 4, 3) * 5 + 2
    prior.set_stats(data)
    torch.testing.assert_close(prior.unstandardise(prior.standardise(data)), data)
    assert torch.isfinite(prior.loss(data[:8]))
    known = torch.full((2, 4, 3), 7.0)
    mask = torch.zeros(2, 4, 3, dtype=torch.bool)
    mask[:, 0] = True
    out = sample_prior(prior, 2, generator=torch.Generator().manual_seed(0), known=known, known_mask=mask)
    assert out.shape == (2, 4, 3)
    torch.testing.assert_close(out[:, 0], known[:, 0])


# ---- token sampling, KV cache, AR baseline -----------------------------------------------------------------

def test_top_p_float64_and_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    p = top_p_probs(logits, 1.0, 0.7)
    assert p.dtype == torch.float64
    torch.testing.assert_close(p, torch.tensor([[0.625, 0.375, 0.0, 0.0]], dtype=torch.float64))
    g = torch.Generator().manual_seed(0)
    draws = sample_tokens(logits.expand(4000, 4), 1.0, 0.7, g)
    assert set(draws.tolist()) == {0, 1} and abs((draws == 0).float().mean() - 0.625) < 0.03
    assert set(sample_tokens(logits.expand(50, 4), 1.0, 0.4, g).tolist()) == {0}  # most likely always kept
    assert sample_tokens(logits, 0.0).item() == 0
    a = sample_tokens(logits.expand(20, 4), 1.0, 1.0, torch.Generator().manual_seed(5))
    b = sample_tokens(logits.expand(20, 4), 1.0, 1.0, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)


@pytest.mark.parametrize("attention,chunks", [("causal", (4, 1, 4)), ("causal", (1,) * 9),
                                              ("block_causal", (3, 3, 3)), ("block_causal", (6, 3))])
def test_gpt_kv_cache_matches_full_forward(attention, chunks):
    """Exact for causal attention with any chunking, and for block-causal attention with whole-block chunks."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=V, n_positions=16, n_embd=16, n_layer=2, n_head=2, attention=attention,
                          block_size=3)).double().eval()
    ids = torch.randint(0, V, (2, 9))
    full = model(ids)
    cache = model.new_cache()
    parts, start = [], 0
    for c in chunks:
        parts.append(model(ids[:, start:start + c], kv_cache=cache))
        start += c
    assert cache.length == 9
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-10, atol=1e-10)
    assert model(ids).shape == full.shape  # no cache: unchanged behaviour


def test_ar_cached_sampling_equals_uncached():
    torch.manual_seed(0)
    ar = build_ar(ARModelConfig(n_embd=16, n_layer=2, n_head=2), V, 12).eval()
    a = sample_ar(ar, 3, 12, bos_id=0, temperature=0)
    b = sample_ar(ar, 3, 12, bos_id=0, temperature=0, use_cache=False)
    assert a.shape == (3, 12) and torch.equal(a, b)
    prompt = torch.randint(0, V, (3, 4))
    c = sample_ar(ar, 3, 12, 0, temperature=1.0, top_p=0.9, generator=torch.Generator().manual_seed(0), prompt=prompt)
    d = sample_ar(ar, 3, 12, 0, temperature=1.0, top_p=0.9, generator=torch.Generator().manual_seed(0), prompt=prompt,
                  use_cache=False)
    assert torch.equal(c[:, :4], prompt) and torch.equal(c, d)


def test_sample_psf_unconditional_prompted_and_mean():
    m = tiny_psf().float()
    m.configure(StageFeatures(landing=True, codes=True))
    prior = FlowPrior(PriorConfig(n_embd=16, n_layer=1, n_head=2, steps=3), dim=m.state_dim + 4, blocks=4)
    g = torch.Generator().manual_seed(0)
    ids = sample_psf(m, prior, 5, generator=g, batch_size=2)
    assert ids.shape == (5, 12) and ids.max() < V
    prompt = torch.randint(0, V, (5, 6))
    ids = sample_psf(m, prior, 5, generator=g, prompt=prompt, top_p=0.9)
    assert torch.equal(ids[:, :6], prompt)
    assert sample_psf(m, prior, 2, trajectory="mean", temperature=0).shape == (2, 12)
    state_only = FlowPrior(PriorConfig(n_embd=16, n_layer=1, n_head=2, steps=3), dim=m.state_dim, blocks=4)
    assert sample_psf(m, state_only, 2, generator=g).shape == (2, 12)  # the decoder gets zero codes


# ---- the commands ------------------------------------------------------------------------------------------

def test_recipe_and_sample_end_to_end(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("FORETHOUGHT_DATA", raising=False)
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "runs"
    args = ["psf", "recipe", "--config", "tiny", "--run.out_dir", str(out)]
    assert cli.main(args) == 0
    run = out / "psf-tiny"
    res = json.loads((run / "results.json").read_text())
    assert set(res["stages"]) == {"base", "landing", "self_realized", "codes", "prior", "blocks2",
                                  "prior_blocks2", "ar"}
    assert res["final_stage"] == "blocks2" and res["params"]["psf"]["total"] > 0 and res["params"]["ar"] > 0
    assert res["stages"]["ar"]["training_tokens"] >= res["model_training_tokens"]
    assert res["stages"]["codes"]["features"] == {"landing": True, "self_realized": True, "codes": True}
    for stage in res["stages"]:
        assert (run / stage / "results.json").is_file()

    # rerun with --resume auto: every stage is complete — the AR baseline and the priors too — so nothing is
    # retrained or re-evaluated, and no file of the run changes (results.json's hash keys the benchmark's cache)
    before = snapshot(run)
    capsys.readouterr()
    assert cli.main([*args, "--resume", "auto"]) == 0
    printed = capsys.readouterr().out
    assert all(f"{stage}: complete, skipped" in printed for stage in res["stages"])
    assert snapshot(run) == before
    # without --resume an existing stage is not silently overwritten
    assert cli.main(args) == 2

    # interrupted in the middle of the first stage: --resume auto reaches the same final weights
    run2 = out / "psf-tiny-cut"
    shutil.copytree(run, run2)
    shutil.rmtree(run2 / "base" / "step-000006")
    (run2 / "base" / "results.json").unlink()
    for stage in res["stages"]:
        if stage != "base":
            shutil.rmtree(run2 / stage)
    assert cli.main([*args, "--run.name", "psf-tiny-cut", "--resume", "auto"]) == 0
    for stage in ("blocks2", "prior_blocks2", "ar"):
        a = load_file(str(latest_checkpoint(run / stage) / "model.safetensors"))
        b = load_file(str(latest_checkpoint(run2 / stage) / "model.safetensors"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), stage

    assert cli.main(["psf", "sample", "--recipe_run", str(run), "--n", "3", "--batch_size", "2",
                     "--prompt_blocks", "1", "--top_p", "0.9"]) == 0
    lines = (run / "samples" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["prompt_tokens"] == 16
    assert (run / "samples" / "samples.txt").read_text().strip()
    assert cli.main(["psf", "sample", "--recipe_run", str(run), "--n", "2", "--model", "ar",
                     "--name", "ar_samples"]) == 0
    assert cli.main(["psf", "sample", "--recipe_run", str(run), "--n", "2", "--stage", "codes",
                     "--trajectory", "mean", "--name", "mean"]) == 0
    art = load_recipe(run, stage="codes")
    assert art.prior is not None and art.model.blocks == 4 and art.ar is not None
    assert load_recipe(run, stage="base").prior is None  # the prior was trained on later states
    ids = sample_psf(art.model, art.prior, 2, steps=2, generator=torch.Generator().manual_seed(0))
    assert ids.shape == (2, 32)

    # the run folder carries what sampling needs: copied elsewhere, with an empty cache and no corpus, it samples
    assert (run / "tokenizer" / "tokenizer.json").is_file()
    moved = tmp_path / "elsewhere" / "psf-tiny"
    shutil.copytree(run, moved)
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "empty-cache"))

    def no_corpus(*args, **kwargs):
        raise AssertionError("the corpus was read")

    import forethought.data.corpora as corpora
    monkeypatch.setattr(corpora, "token_array", no_corpus)
    monkeypatch.setattr(corpora, "load_corpus_text", no_corpus)
    assert cli.main(["psf", "sample", "--recipe_run", str(moved), "--n", "2", "--name", "moved"]) == 0
    moved_rows = [json.loads(x) for x in (moved / "moved" / "samples.jsonl").read_text().splitlines()]
    assert moved_rows[0]["text"] == load_recipe(run).tokenizer.decode(moved_rows[0]["tokens"])
    # ... and samples from prompts of the user's own text, tokenised with the run's tokenizer
    prompts = tmp_path / "prompts.txt"
    words = "the cat sat on the mat and the dog ran to the park while the bird sang in the tree by the river"
    prompts.write_text(f"{words}\n\n{words} again\n")
    assert cli.main(["psf", "sample", "--recipe_run", str(moved), "--n", "2", "--name", "own-prompts",
                     "--prompt_blocks", "1", "--prompt_file", str(prompts)]) == 0
    tok = load_recipe(moved).tokenizer
    own = [json.loads(x) for x in (moved / "own-prompts" / "samples.jsonl").read_text().splitlines()]
    for row, line in zip(own, (words, f"{words} again"), strict=True):
        assert row["prompt_tokens"] == 16
        assert row["tokens"][:16] == tok(line, add_special_tokens=False)["input_ids"][:16]
    assert cli.main(["psf", "sample", "--recipe_run", str(moved), "--n", "3", "--name", "too-few",
                     "--prompt_blocks", "1", "--prompt_file", str(prompts)]) == 2
    assert not (moved / "too-few").exists()
    assert not (tmp_path / "empty-cache").exists()
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))

    # importing the package and sampling a run never import the training loop
    code = ("import sys\nimport forethought.psf\nfrom forethought.psf.generate import SampleConfig, sample\n"
            f"sample(SampleConfig(recipe_run={str(run)!r}, name='light', n=2))\n"
            "print(sorted(m for m in sys.modules if m in ('forethought.core.trainer', 'forethought.psf.recipe', "
            "'forethought.psf.token_flow')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "FORETHOUGHT_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert (run / "light" / "samples.jsonl").is_file()


def test_eval_every_logs_validation_rows_in_every_stage(tmp_path, monkeypatch):
    """``<stage>.train.eval_every``: PSF stages log teacher-forced CE and KL, the prior its flow loss, the AR
    baseline its CE, every N steps and at the last step; the last row is the stage's final evaluation."""
    monkeypatch.delenv("FORETHOUGHT_DATA", raising=False)
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    assert cli.main(["psf", "recipe", "--config", "tiny", "--run.out_dir", str(tmp_path), "--run.name", "ev",
                     "--landing.enabled", "false", "--self_realized.enabled", "false", "--longer_blocks.blocks", "[]",
                     "--base.train.eval_every", "2", "--codes.train.eval_every", "2", "--prior.train.eval_every", "4",
                     "--ar.train.eval_every", "4"]) == 0
    run = tmp_path / "ev"
    res = json.loads((run / "results.json").read_text())["stages"]
    expect = {"base": ([2, 4, 6], "val_ce"), "codes": ([2, 3], "val_ce"), "prior": ([4, 6], "val_flow_loss"),
              "ar": ([4, 8, 9], "val_ce")}  # ar: 9 steps, the tokens of base (6) + codes (3)
    for stage, (steps, key) in expect.items():
        rows = [json.loads(line) for line in (run / stage / "metrics.jsonl").read_text().splitlines()]
        evals = [r for r in rows if r.get("eval")]
        assert [r["step"] for r in evals] == steps, stage
        assert all(math.isfinite(r[key]) for r in evals), stage
        assert evals[-1][key] == pytest.approx(res[stage][key]), stage
        assert (run / stage / "eval_curve.png").is_file()
        if stage == "codes":
            assert all(r["val_kl"] > 0 for r in evals)


def test_bad_inputs(tmp_path, capsys):
    assert cli.main(["psf", "recipe", "--config", "tiny", "--model.blocks", "5", "--run.out_dir", str(tmp_path)]) == 2
    assert "multiple of the block count" in capsys.readouterr().err
    assert cli.main(["psf", "sample", "--recipe_run", str(tmp_path / "nothing")]) == 2
    with pytest.raises(ForethoughtError):
        PSFModel(PSFModelConfig(vocab_size=V, seq_len=10, blocks=4))
    assert cli.main(["psf", "recipe", "--config", "tiny", "--longer_blocks.blocks", "[8]",
                     "--run.out_dir", str(tmp_path)]) == 2
    assert "max_blocks" in capsys.readouterr().err


@pytest.mark.parametrize("overrides,message", [
    (["--prior.model.n_head", "3"], r"^prior\.model: n_embd \(32\) must be divisible by n_head \(3\)$"),
    (["--ar.model.n_head", "5"], r"^ar\.model: n_embd \(32\) must be divisible by n_head \(5\)$"),
    (["--model.n_head", "3"], r"^model: n_embd \(32\) must be divisible by n_head \(3\)$"),
    (["--prior.model.steps", "0"], r"^prior\.model: steps must be at least 1, got 0$"),
    (["--longer_blocks.blocks", "[5]"], r"^longer_blocks\.blocks: .*multiple of the block count K=5$"),
    (["--rollout.top_p", "0"], r"^rollout: top_p must be in \(0, 1\]"),
    (["--data.eval_sequences", "0"], r"^data: eval_sequences must be at least 1, got 0$"),
    (["--codes.train.steps", "0"], r"^codes\.train: steps must be at least 1, got 0$"),
    (["--model.input_dropout", "-0.1"], r"^model: input_dropout must be in \[0, 1\), got -0.1$"),
    (["--ar.train.steps", "-1"], r"^ar\.train: steps must .*-1$"),
    (["--base.enabled", "false", "--landing.enabled", "false", "--self_realized.enabled", "false",
      "--codes.enabled", "false"], "every PSF model stage is disabled"),
])
def test_every_stage_is_validated_when_the_config_loads(overrides, message):
    """A bad setting of any stage fails at load, naming its section — not after the earlier stages trained."""
    from forethought.core.config import load_config
    from forethought.psf.recipe import RecipeConfig

    with pytest.raises(ForethoughtError, match=message):
        load_config(RecipeConfig, cli.resolve_config_path("psf", "recipe", "tiny"), overrides)


def test_recipe_validates_a_config_built_in_python(tmp_path):
    from forethought.core.config import load_config
    from forethought.psf.recipe import RecipeConfig, run

    cfg = load_config(RecipeConfig, cli.resolve_config_path("psf", "recipe", "tiny"), ["--run.out_dir", str(tmp_path)])
    cfg.prior.model.n_head = 3
    with pytest.raises(ForethoughtError, match="prior.model: n_embd"):
        run(cfg)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("overrides,message", [
    (["--temperature", "-1"], r"^temperature must be a number >= 0 \(0 = greedy\), got -1.0$"),
    (["--temperature", "nan"], "temperature must be a number >= 0"),
    (["--top_p", "0"], r"^top_p must be in \(0, 1\], got 0.0$"),
    (["--top_p", "1.5"], r"^top_p must be in \(0, 1\]"),
    (["--n", "0"], "^n must be at least 1, got 0$"),
    (["--batch_size", "0"], "^batch_size must be at least 1, got 0$"),
    (["--prior_steps", "-1"], "^prior_steps must not be negative, got -1$"),
    (["--prompt_blocks", "-2"], "^prompt_blocks must not be negative, got -2$"),
    (["--prompt_file", "p.txt"], "^prompt_file gives the prompts of prompted generation: set --prompt_blocks"),
    (["--prompt_blocks", "1", "--prompt_file", "/nonexistent/p.txt"], "^prompt_file /nonexistent/p.txt: no such file$"),
    (["--name", ""], "^name must be a plain folder name"),
    (["--name", "../elsewhere"], "^name must be a plain folder name"),
])
def test_sampling_settings_are_validated_when_the_config_loads(overrides, message):
    from forethought.core.config import load_config
    from forethought.psf.generate import SampleConfig

    with pytest.raises(ForethoughtError, match=message):
        load_config(SampleConfig, None, ["--recipe_run", "anywhere", *overrides])


def test_top_p_probs_rejects_what_it_cannot_sample():
    logits = torch.zeros(1, 4)
    with pytest.raises(ValueError, match="temperature must be > 0") as e:
        top_p_probs(logits, temperature=-1.0)
    assert "greedy=" not in str(e.value)  # no such parameter
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        top_p_probs(logits, top_p=0.0)


def test_zero_code_layers_are_a_saddle_that_a_normal_code_input_breaks():
    """model.code_in_init: with the code head and the code input both at zero the posterior is N(0, I) (no KL
    beyond the free bits) and the head gets exactly no gradient; a normal code input gives it one."""
    torch.manual_seed(0)
    m = PSFModel(PSFModelConfig(vocab_size=V, seq_len=12, blocks=4, n_embd=16, enc_layers=2, dec_layers=2,
                                n_head=2, code_dim=4)).double().train()
    m.configure(StageFeatures(codes=True))
    tokens = torch.randint(0, V, (3, 12))
    m(tokens)["loss"].backward()
    assert m.code_head.weight.grad is None or not m.code_head.weight.grad.any()
    assert m.code_in.weight.grad.abs().sum() > 0  # the input layer does move, but only by the code's noise
    m.zero_grad()
    zero = m.code_in.weight.clone()
    start_codes(m, "zero", torch.Generator().manual_seed(1))
    assert torch.equal(m.code_in.weight, zero)  # "zero" leaves the layer as it is
    start_codes(m, "normal", torch.Generator().manual_seed(1))
    w = m.code_in.weight.clone()
    assert 0.01 < float(w.std()) < 0.03
    start_codes(m, "normal", torch.Generator().manual_seed(1))
    assert torch.equal(m.code_in.weight, w)  # seeded
    m(tokens)["loss"].backward()
    assert m.code_head.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("train", [False, True])
def test_realized_state_never_sees_its_own_block_with_codes_and_landing(train):
    """Issue 31: with codes and landing on, the rollout's realized s_k (the re-encoded generated block k-1) must
    not change when block k (its tokens, hence its posterior code) or any later block changes. Before the fix,
    block k's code shaped the landing token generated block k-1 reads."""
    m = tiny_psf().train(train)
    m.configure(StageFeatures(landing=True, codes=True))
    with torch.no_grad():  # codes that move every branch's first token
        m.code_in.weight.mul_(30)
        m.code_head.weight.mul_(10)
        m.decoder.head.weight.mul_(20)  # (tied to wte) sharp logits, so a code changes what is sampled
    n, K = m.block_len, m.blocks
    tokens = torch.randint(0, V, (6, 12))

    def rollout(x: torch.Tensor) -> torch.Tensor:  # the same random stream: a function of the tokens
        return realized_summaries(m, x, temperature=1.0, generator=torch.Generator().manual_seed(3))

    real = rollout(tokens)
    s_real = m.states_from(real)  # realized s_k = summary of generated block k-1 (raw)
    for k in range(1, K):
        other = tokens.clone()
        other[:, k * n:] = (other[:, k * n:] + 1 + torch.arange(other[:, k * n:].numel()).view(6, -1)) % V
        s_other = m.states_from(rollout(other))
        if k + 1 < K:  # the next state does change (generated block k is written from block k's code)
            assert not torch.equal(s_other[:, k + 1], s_real[:, k + 1])
        torch.testing.assert_close(s_other[:, :k + 1], s_real[:, :k + 1], rtol=1e-12, atol=1e-12,
                                   msg=f"realized s_{k + 1} depends on block {k + 1} or later")
    # the rollout still writes each block from its own code: changing block k's code changes generated block k
    with torch.no_grad():
        m.code_in.weight.mul_(-1)
    assert not torch.equal(rollout(tokens)[:, 0], real[:, 0])


def test_evaluation_draws_codes_from_a_seeded_generator():
    """Issue 31: with codes on, two evaluations of the same model give identical numbers, whatever the global
    RNG did in between, and evaluating leaves the global RNG where it was."""
    m = tiny_psf()
    m.configure(StageFeatures(codes=True))
    windows = torch.randint(0, V, (5, 12))
    torch.manual_seed(1)
    state = torch.get_rng_state()
    a = evaluate_psf(m, windows, batch=2)
    assert torch.equal(torch.get_rng_state(), state)
    torch.randn(7)
    assert evaluate_psf(m, windows, batch=2) == a
    assert evaluate_psf(m, windows, batch=2, seed=1)["val_ce"] != a["val_ce"]  # the noise does matter
    assert a["val_kl"] > 0


# ---- the code channel's options (issue 31) ----------------------------------------------------------------------

def codes_psf(**options) -> PSFModel:
    torch.manual_seed(0)
    m = PSFModel(PSFModelConfig(vocab_size=V, seq_len=12, blocks=4, n_embd=16, enc_layers=2, dec_layers=2,
                                n_head=2, code_dim=4, **options)).double()
    with torch.no_grad():
        m.code_in.weight.normal_(0, 0.3)
        m.code_head.weight.normal_(0, 0.3)
    m.configure(StageFeatures(codes=True))
    return m


def test_code_enters_every_input_position_of_its_branch_only():
    """query: branch k's code reaches only its query slot (so every position, through attention); inputs: it is
    also added to every input embedding of branch k, and still never to another branch."""
    tokens = torch.randint(0, V, (2, 12))
    for enters in ("query", "inputs"):
        m = codes_psf(code_enters=enters).eval()
        s = m.states(tokens)
        c = torch.randn(2, 4, 4, dtype=torch.float64, requires_grad=True)
        logits = m.decode_logits(tokens, s, c)  # (B, K, n, V)
        for k in range(4):
            (g,) = torch.autograd.grad(logits[:, k].sum(), c, retain_graph=True)
            assert g[:, k].abs().sum() > 0 and g[:, [j for j in range(4) if j != k]].abs().sum() == 0
    # the input layer's gradient differs: inputs mode sends each code to n positions instead of one
    m_q, m_i = codes_psf(code_enters="query"), codes_psf(code_enters="inputs")
    torch.testing.assert_close(m_q.prefix(m_q.states(tokens), c.detach()), m_i.prefix(m_i.states(tokens), c.detach()))
    assert not torch.allclose(m_q.decode_logits(tokens, m_q.states(tokens), c.detach()),
                              m_i.decode_logits(tokens, m_i.states(tokens), c.detach()))


def test_code_init_sigma_and_free_bits_per_block():
    m = codes_psf(code_init_sigma=0.1, free_bits_block=5.0)
    with torch.no_grad():
        m.code_head.weight.zero_()
    start_codes(m, "zero", torch.Generator().manual_seed(0), m.config.code_init_sigma)
    tokens = torch.randint(0, V, (3, 12))
    mu, logvar = m.posterior(m.encode(tokens)[1])
    torch.testing.assert_close(logvar.exp().sqrt(), torch.full_like(logvar, 0.1))  # sigma 0.1 everywhere
    assert torch.equal(mu, torch.zeros_like(mu))
    per_block = 0.5 * (0.01 - 1 - math.log(0.01)) * 4  # KL of N(0, 0.1^2) per block (4 dims), ~7.2 nats
    out = m.train()(tokens)
    assert out["kl"].item() == pytest.approx(per_block * 4 / 12)
    assert out["loss"].item() - out["ce"].item() == pytest.approx(per_block * 4 / 12)  # above the 5 nats per block
    m.config.free_bits_block = 10.0  # every block under its budget: 10 nats per block charged
    out = m(tokens)
    assert out["loss"].item() - out["ce"].item() == pytest.approx(10.0 * 4 / 12)
    m.config.free_bits_block, m.config.free_bits = 0.0, 1.0  # off: free_bits x block length (3 nats)
    out = m(tokens)
    assert (out["loss"] - out["ce"]).item() == pytest.approx(per_block * 4 / 12)


def test_deterministic_warm_up_feeds_the_posterior_mean():
    m = codes_psf().train()
    tokens = torch.randint(0, V, (3, 12))
    mu = m.posterior(m.encode(tokens)[1])[0]
    a, b = m(tokens, code_noise=False), m(tokens, code_noise=False)
    torch.testing.assert_close(a["codes"], mu)
    torch.testing.assert_close(a["ce"], b["ce"])
    assert a["kl"].item() > 0  # the KL is still charged
    assert not torch.allclose(m(tokens)["codes"], mu)  # the default: sampled codes


def test_bn_vae_mean_normalisation():
    """code_mean_norm batch: in training each block index's posterior means have mean = the learned shift and
    std = gamma over the batch (so E[KL] per dimension >= gamma^2/2); block k's code reads no other block."""
    m = codes_psf(code_mean_norm="batch", code_mean_gamma=0.5).train()
    tokens = torch.randint(0, V, (16, 12))
    mu = m.posterior(m.encode(tokens)[1])[0]  # (B, K, D)
    torch.testing.assert_close(mu.mean(0), torch.zeros_like(mu[0]), atol=1e-10, rtol=0)
    torch.testing.assert_close(mu.std(0, unbiased=False), torch.full_like(mu[0], 0.5), atol=1e-3, rtol=0)
    assert {n for n, _ in m.named_parameters() if "code" in n} >= {"code_shift"}
    assert sum(p.numel() for p in m.code_layers()) == sum(p.numel() for p in m.code_head.parameters()) + \
        sum(p.numel() for p in m.code_in.parameters()) + 4
    emb = m.encoder.wte(tokens).detach().requires_grad_(True)
    mu = m.posterior(m.encode(None, embeds=emb)[1])[0]
    n = m.block_len
    for k in range(4):
        (g,) = torch.autograd.grad(mu[:, k].sum(), emb, retain_graph=True)
        assert torch.all(g[:, (k + 1) * n:] == 0), f"code {k + 1} reads a later block"
    m.eval()  # running estimates at evaluation
    assert torch.isfinite(m.posterior(m.encode(tokens[:1])[1])[0]).all()
    assert "code_norm.running_mean" in m.state_dict() and "code_norm.running_mean" not in codes_psf().state_dict()


@pytest.mark.parametrize("unit", ["block", "sequence"])
def test_drop_codes_zeroes_the_expected_fraction_per_unit(unit):
    """Code dropout: each block's code (or every code of a sequence) is zero with probability p, else unchanged."""
    codes = torch.randn(2000, 4, 3) + 5.0  # never zero by chance
    g = torch.Generator().manual_seed(0)
    out = drop_codes(codes, 0.3, unit, g)
    zero = (out == 0).all(-1)  # (B, K)
    assert torch.equal(out[~zero], codes[~zero])  # a code is kept exactly or zeroed whole
    assert zero.double().mean().item() == pytest.approx(0.3, abs=0.02)
    if unit == "sequence":
        assert torch.equal(zero, zero[:, :1].expand_as(zero))  # all of a sequence's blocks together
    else:
        assert 0 < zero.all(1).double().mean().item() < 0.05  # blocks drawn independently (0.3^4 = 0.008)
    assert torch.equal(drop_codes(codes, 0.0, unit, g), codes)


def test_code_dropout_in_training_only_and_the_kl_charged_for_every_block():
    """model.code_dropout p: in training the decoder gets zero codes for the dropped blocks (out["codes"] is what
    it got) and the KL is charged as without dropout; at evaluation (and so in sampling) never."""
    m, plain = codes_psf(code_dropout=0.5), codes_psf()
    tokens = torch.randint(0, V, (64, 12))
    torch.manual_seed(1)
    dropped = m.train()(tokens)
    torch.manual_seed(1)
    kept = plain.train()(tokens)
    zero = (dropped["codes"] == 0).all(-1)
    assert 0.3 < zero.double().mean().item() < 0.7
    assert torch.equal(dropped["codes"][~zero], kept["codes"][~zero])
    assert dropped["kl"].item() == pytest.approx(kept["kl"].item())
    assert dropped["ce"].item() != pytest.approx(kept["ce"].item())
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert m.eval()(tokens, code_generator=g1)["ce"].item() == plain.eval()(tokens, code_generator=g2)["ce"].item()
    with pytest.raises(ForethoughtError, match=r"code_dropout must be in \[0, 1\)"):
        PSFModelConfig(vocab_size=V, seq_len=12, blocks=4, code_dropout=1.0).validate()


def test_calibration_also_sets_the_code_mean_norm_in_a_codes_stage():
    """BN-VAE's running estimates of the raw posterior means are recalibrated with the states' (a stage without
    codes leaves them as built)."""
    m = codes_psf(code_mean_norm="batch")
    windows = torch.randint(0, V, (40, 12))
    calibrate_states(m, windows, batch=16)
    raw = m.code_head(m.summaries(windows)[1]).chunk(2, dim=-1)[0]  # (40, K, D)
    torch.testing.assert_close(m.code_norm.running_mean[:4], raw.mean(0))
    torch.testing.assert_close(m.code_norm.running_var[:4], raw.var(0, unbiased=False))
    before = codes_psf(code_mean_norm="batch").configure(StageFeatures(codes=False))
    calibrate_states(before, windows, batch=16)
    assert torch.all(before.code_norm.running_mean == 0) and torch.all(before.code_norm.running_var == 1)


@pytest.mark.parametrize("overrides,message", [
    ({"code_init_sigma": 0.0}, "code_init_sigma must be a number > 0"),
    ({"code_lr_factor": -1.0}, "code_lr_factor must be a number > 0"),
    ({"code_warmup_steps": -1}, "code_warmup_steps must not be negative"),
    ({"free_bits_block": -1.0}, "free_bits_block must not be negative"),
    ({"code_mean_gamma": float("nan")}, "code_mean_gamma must be a number > 0")])
def test_code_options_are_validated(overrides, message):
    with pytest.raises(ForethoughtError, match=message):
        PSFModelConfig(vocab_size=V, seq_len=12, blocks=4, **overrides).validate()


def test_recipe_applies_the_code_options(tmp_path, monkeypatch):
    """From the command line: the deterministic warm-up feeds the posterior mean for the codes stage's first
    steps only, the code layers train at code_lr_factor x lr, and the starting sigma reaches the posterior."""
    import forethought.psf.recipe as recipe_module

    monkeypatch.delenv("FORETHOUGHT_DATA", raising=False)
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    seen: dict[str, list] = {"noise": [], "scales": [], "sigma": []}
    real_train, real_forward = recipe_module.train, PSFModel.forward

    def train(model, loss_fn, *args, hooks, **kwargs):
        lr_scales = hooks.lr_scales
        if kwargs.get("desc") == "codes":
            seen["scales"].append(sorted(set((lr_scales or {}).values())))
            n = sum(1 for p in model.parameters() if id(p) in (lr_scales or {}))
            assert n == len(model.code_layers())
            seen["sigma"].append(float(model.code_head.bias[model.code_dim:].mean()))
        return real_train(model, loss_fn, *args, hooks=hooks, **kwargs)

    def forward(self, tokens, *args, **kwargs):
        if self.training and self.use_codes:
            seen["noise"].append(bool(kwargs.get("code_noise", True)))
        return real_forward(self, tokens, *args, **kwargs)

    monkeypatch.setattr(recipe_module, "train", train)
    monkeypatch.setattr(PSFModel, "forward", forward)
    assert cli.main(["psf", "recipe", "--config", "tiny", "--run.out_dir", str(tmp_path), "--landing.enabled",
                     "false", "--self_realized.enabled", "false", "--longer_blocks.blocks", "[]", "--baselines", "[]",
                     "--prior.enabled", "false", "--codes.train.steps", "4", "--model.code_warmup_steps", "2",
                     "--model.code_lr_factor", "3.0", "--model.code_init_sigma", "0.5",
                     "--model.code_enters", "inputs", "--model.code_mean_norm", "batch",
                     "--model.free_bits_block", "2.0"]) == 0
    assert seen["noise"] == [False, False, True, True]
    assert seen["scales"] == [[3.0]] and seen["sigma"] == [pytest.approx(2 * math.log(0.5))]


def test_block_schedule_warm_starts_each_prior_and_ends_with_both_configurations(tmp_path, monkeypatch):
    """A block-size schedule (here K = 4 -> 2 -> 1 on the planted corpus, as the paper's 64/32/16/8) with the
    state-only variant: every block count trains a model stage, a main prior and a state-only prior; each prior
    warm-starts from the same variant's prior at the previous block count, and the final K has both
    configurations (psf sample --prior state_only at K = 1)."""
    from test_planted import PLANTED_TINY

    import forethought.psf.recipe as recipe_module

    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    sources: dict[str, str] = {}
    real_load = recipe_module.load_weights

    def load_weights(module, weights, strict=True, where=""):
        if isinstance(module, FlowPrior):
            sources[str(len(sources))] = where
        return real_load(module, weights, strict=strict, where=where)

    monkeypatch.setattr(recipe_module, "load_weights", load_weights)
    assert cli.main(["psf", "recipe", "--config", "tiny", "--run.out_dir", str(tmp_path), "--run.name", "sched",
                     "--landing.enabled", "false", "--self_realized.enabled", "false", "--baselines", "[]",
                     "--longer_blocks.blocks", "[2, 1]", "--prior.state_only_variant", "true",
                     "--model.code_dropout", "0.3", *PLANTED_TINY]) == 0
    run = tmp_path / "sched"
    res = json.loads((run / "results.json").read_text())
    assert list(res["stages"]) == ["base", "codes", "prior", "prior_state_only", "blocks2", "prior_blocks2",
                                   "prior_state_only_blocks2", "blocks1", "prior_blocks1", "prior_state_only_blocks1"]
    for k in (4, 2, 1):
        main, only = ("prior", "prior_state_only") if k == 4 else (f"prior_blocks{k}", f"prior_state_only_blocks{k}")
        assert res["stages"][main]["blocks"] == res["stages"][only]["blocks"] == k
        assert res["stages"][main]["with_codes"] and not res["stages"][only]["with_codes"]
    warm = [str(latest_checkpoint(run / s)) for s in ("prior", "prior_state_only", "prior_blocks2",
                                                     "prior_state_only_blocks2")]
    assert list(sources.values()) == warm  # each from its own variant's previous prior, in training order
    art = load_recipe(run)
    assert art.stage == "blocks1" and art.model.blocks == 1
    assert art.prior.blocks == art.state_only_prior.blocks == 1 and art.state_only_prior.dim == art.model.state_dim
    assert cli.main(["psf", "sample", "--recipe_run", str(run), "--n", "2", "--prior", "state_only"]) == 0


def test_stages_from_copies_the_matching_stages_and_trains_the_rest(tmp_path, monkeypatch, capsys):
    """``--stages_from``: a run with a longer codes stage starts from another run's base and landing (copied, not
    retrained; the same weights as training them here) and trains codes itself; a source that matches nothing,
    or is no run, is one line and exit 2 before anything is written."""
    monkeypatch.delenv("FORETHOUGHT_DATA", raising=False)
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    base = ["psf", "recipe", "--config", "tiny", "--run.out_dir", str(tmp_path), "--self_realized.enabled", "false",
            "--longer_blocks.blocks", "[]", "--baselines", "[]", "--prior.enabled", "false"]
    assert cli.main([*base, "--run.name", "a"]) == 0
    longer = [*base, "--codes.train.steps", "5"]
    assert cli.main([*longer, "--run.name", "fresh"]) == 0  # the reference: every stage trained here
    capsys.readouterr()
    assert cli.main([*longer, "--run.name", "b", "--stages_from", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    assert "base: complete, skipped" in printed and "landing: complete, skipped" in printed
    assert "codes: complete" not in printed
    res = json.loads((tmp_path / "b" / "results.json").read_text())
    assert res["stages_from"] == {"run": str(tmp_path / "a"), "stages": ["base", "landing"]}
    assert (tmp_path / "b" / "landing" / "copied_from.txt").read_text().strip() == str(tmp_path / "a")
    assert not (tmp_path / "b" / "codes" / "copied_from.txt").exists()
    for stage in ("landing", "codes"):
        x = load_file(str(latest_checkpoint(tmp_path / "fresh" / stage) / "model.safetensors"))
        y = load_file(str(latest_checkpoint(tmp_path / "b" / stage) / "model.safetensors"))
        assert all(torch.equal(x[k], y[k]) for k in x), stage
    # a restart finds its own copies and trains nothing
    assert cli.main([*longer, "--run.name", "b", "--stages_from", str(tmp_path / "a"), "--resume", "auto"]) == 0
    assert json.loads((tmp_path / "b" / "results.json").read_text())["stages_from"]["stages"] == ["base", "landing"]
    # ... and keeps its results.json (whose bytes key psf eval's cache) when the source is named another way
    before = (tmp_path / "b" / "results.json").read_bytes()
    monkeypatch.chdir(tmp_path)
    assert cli.main([*longer, "--run.name", "b", "--stages_from", "a", "--resume", "auto"]) == 0
    assert (tmp_path / "b" / "results.json").read_bytes() == before
    # code dropout acts only where codes are read: the stages before codes are still copied, codes trains here
    assert cli.main([*base, "--run.name", "e", "--model.code_dropout", "0.5",
                     "--stages_from", str(tmp_path / "a")]) == 0
    assert json.loads((tmp_path / "e" / "results.json").read_text())["stages_from"]["stages"] == ["base", "landing"]

    capsys.readouterr()
    assert cli.main([*base, "--run.name", "c", "--model.n_embd", "24", "--stages_from", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "the first, base, cannot be copied (its settings differ in model.n_embd)" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "c").exists()
    assert cli.main([*base, "--run.name", "d", "--stages_from", str(tmp_path / "nowhere")]) == 2
    assert "is not a 'psf recipe' run folder" in capsys.readouterr().err and not (tmp_path / "d").exists()


def test_prior_code_data_mean_is_the_posterior_mean_and_draws_vary():
    """prior.model.code_data: the prior's training data carry each block's posterior mean (noise-free, the same at
    every call) or one posterior draw (the paper's; a new draw per call around that mean)."""
    from forethought.psf.recipe import trajectories

    m = tiny_psf()
    m.configure(StageFeatures(codes=True))
    x = torch.randint(1, V, (3, 12))
    _, feats = m.encode(x)
    mu, _ = m.posterior(feats)
    a, b = trajectories(m, x, True, "mean"), trajectories(m, x, True, "mean")
    assert a.shape == (3, 4, m.state_dim + 4)
    assert torch.equal(a, b) and torch.allclose(a[..., m.state_dim:], mu)
    d1, d2 = trajectories(m, x, True, "draw"), trajectories(m, x, True, "draw")
    assert torch.equal(d1[..., :m.state_dim], a[..., :m.state_dim])  # the states are the same
    assert not torch.allclose(d1[..., m.state_dim:], d2[..., m.state_dim:])
    assert trajectories(m, x, False, "mean").shape == (3, 4, m.state_dim)


@pytest.mark.parametrize("with_codes,code_data", [(False, "mean"), (True, "mean"), (True, "draw")])
def test_trajectory_bank_reads_what_trajectories_compute(with_codes, code_data):
    """The per-document bank of prior data (aligned windows): a batch read from it equals trajectories() of the
    same windows, draws included (the same noise from the same global random stream); None when windows start
    anywhere."""
    from forethought.data.corpora import random_windows, window_slots
    from forethought.psf.recipe import bank_trajectories, trajectories, trajectory_bank

    m = tiny_psf()
    m.configure(StageFeatures(codes=with_codes))
    m.eval()
    L = 12
    tokens = torch.randint(1, V, (L * 10,)).numpy()
    bank = trajectory_bank(m, tokens, L, L, with_codes, "cpu", batch=3)
    assert bank.shape == (10, 4, m.state_dim + (2 * m.code_dim if with_codes else 0))
    slots = window_slots(len(tokens), 5, L, torch.Generator().manual_seed(7), L)
    windows = random_windows(tokens, 5, L, torch.Generator().manual_seed(7), L)
    torch.manual_seed(3)
    want = trajectories(m, windows, with_codes, code_data)
    torch.manual_seed(3)
    got = bank_trajectories(bank, torch.from_numpy(slots), m.state_dim, with_codes, code_data)
    assert torch.allclose(got, want, atol=1e-5)
    assert trajectory_bank(m, tokens, L, 1, with_codes, "cpu") is None  # windows anywhere: computed per step
