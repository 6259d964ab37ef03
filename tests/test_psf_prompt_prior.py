"""The prompt-conditioned flow prior (``prior.model.conditioning known_mask``): which entries a prompt fixes, a loss
blind to the known entries, the all-zero mask as the unconditional path, prompted sampling that keeps the known
states exactly (with and without replacement), the continuation scores on the planted corpus, bad settings, and
a tiny planted recipe with the conditioned prior through the CLI."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from test_planted import PLANTED_TINY  # the tiny planted-corpus settings the PSF tests share

from forethought import cli
from forethought.core.config import load_config
from forethought.core.errors import ForethoughtError
from forethought.data.planted import PlantedConfig, build_generator, log_likelihood, sample_documents
from forethought.psf.build import prior_for
from forethought.psf.config import StageFeatures
from forethought.psf.generate import SampleConfig, load_recipe, sample_psf, sample_states
from forethought.psf.model import PSFModel, PSFModelConfig
from forethought.psf.prior import (
    FlowPrior,
    PriorConfig,
    flow_loss,
    leading_known_mask,
    most_known_blocks,
    sample_prior,
)
from forethought.psf.recipe import RecipeConfig
from forethought.psf.scores import prompted_scores

V = 19
SMALL = dict(n_embd=16, n_layer=1, n_head=2, steps=4)


def conditioned(dim: int = 5, blocks: int = 4, state_dim: int = 3, lead: int = 1) -> FlowPrior:
    torch.manual_seed(0)
    prior = FlowPrior(PriorConfig(**SMALL, conditioning="known_mask"), dim, blocks, state_dim, lead)
    prior.set_stats(torch.randn(40, blocks, dim) * 3 + 1)
    return prior


def test_known_mask_layout():
    mask = leading_known_mask(torch.tensor([0, 1, 2, 4]), blocks=4, dim=5, state_dim=3, prompt_lead=1)
    assert mask.shape == (4, 4, 5) and not mask[0].any()  # m = 0: nothing known (unconditional)
    for row, m in zip(mask[1:], (1, 2, 4), strict=True):
        assert row[:, :3].any(-1).tolist() == [k < min(m + 1, 4) for k in range(4)]  # states: m + 1 (predictive)
        assert row[:, 3:].any(-1).tolist() == [k < m for k in range(4)]  # codes: m
        assert row[:, :3].all(-1).tolist() == row[:, :3].any(-1).tolist()  # whole state vectors
    content = leading_known_mask(torch.tensor([2]), 4, 3, 3, 0)[0]
    assert content.any(-1).tolist() == [True, True, False, False]
    assert most_known_blocks(4, 5, 3, 1) == 3  # the last code stays unknown
    assert most_known_blocks(4, 3, 3, 1) == 2  # states only, predictive: m = 3 would fix s_1..s_4
    assert most_known_blocks(4, 3, 3, 0) == 3 and most_known_blocks(1, 3, 3, 1) == 0


def test_conditioned_loss_ignores_the_known_entries():
    prior = conditioned()
    x = torch.randn(6, 4, 5)
    mask = prior.known_mask(torch.tensor([0, 1, 2, 3, 1, 2]))
    forward = prior.forward

    def loss_with(shift: torch.Tensor) -> torch.Tensor:
        prior.forward = lambda *a, **k: forward(*a, **k) + shift  # type: ignore[method-assign]
        try:
            torch.manual_seed(7)
            return prior.loss(x, mask)
        finally:
            prior.forward = forward  # type: ignore[method-assign]

    zero = torch.zeros(6, 4, 5)
    base = loss_with(zero)
    known_shift = torch.where(mask, torch.full_like(zero, 1e3), zero)  # another predicted velocity where known
    assert torch.equal(loss_with(known_shift), base)
    unknown_shift = torch.where(~mask, torch.full_like(zero, 0.1), zero)
    assert not torch.allclose(loss_with(unknown_shift), base)
    # the velocity error averaged over the counted entries only
    x_hat, xx, x_t = (torch.randn(3, 4, 5) for _ in range(3))
    t = torch.rand(3)
    counted = torch.rand(3, 4, 5) > 0.5
    c = (1 - t).clamp(min=0.05).view(-1, 1, 1)
    ref = (((x_hat - xx) / c) ** 2)[counted].mean()  # (x̂ - x_t)/c - (x - x_t)/c
    torch.testing.assert_close(flow_loss(x_hat, xx, x_t, t, counted=counted), ref)
    torch.testing.assert_close(flow_loss(x_hat, xx, x_t, t, counted=torch.ones_like(counted)),
                               flow_loss(x_hat, xx, x_t, t))
    # drawn masks: the loss runs with the global RNG and backpropagates
    torch.manual_seed(1)
    loss = prior.loss(x)
    loss.backward()
    assert torch.isfinite(loss) and prior.net.wte.weight.grad is not None


def test_zero_mask_is_the_unconditional_path():
    none = FlowPrior(PriorConfig(**SMALL), 5, 4)
    prior = conditioned()
    assert none.net.wte.in_features == 5 and prior.net.wte.in_features == 15  # [x_t, known·mask, mask]
    x_t, t = torch.randn(3, 4, 5), torch.rand(3)
    zeros = torch.zeros(3, 4, 5, dtype=torch.bool)
    with torch.no_grad():
        assert torch.equal(prior(x_t, t), prior(x_t, t, torch.randn(3, 4, 5) * 9, zeros))
        free = sample_prior(prior, 3, generator=torch.Generator().manual_seed(0))
        for replace in (True, False):
            masked = sample_prior(prior, 3, generator=torch.Generator().manual_seed(0), known=torch.randn(3, 4, 5),
                                  known_mask=zeros, replace=replace)
            assert torch.equal(free, masked)
    # an unconditional prior's loss is the plain velocity MSE over every entry, as before
    x = torch.randn(4, 4, 5)
    torch.manual_seed(3)
    plain = none.loss(x)
    torch.manual_seed(3)
    xs, noise = none.standardise(x), torch.randn(4, 4, 5)
    from forethought.psf.prior import interpolate, logit_normal_t

    tt = logit_normal_t(4)
    x_t = interpolate(xs, noise, tt)
    torch.testing.assert_close(plain, flow_loss(none(x_t, tt), xs, x_t, tt))
    with pytest.raises(ValueError, match="unconditional prior"):
        none.loss(x, torch.zeros(4, 4, 5, dtype=torch.bool))


def tiny_model(states: str = "predictive") -> PSFModel:
    torch.manual_seed(0)
    m = PSFModel(PSFModelConfig(vocab_size=V, seq_len=12, blocks=4, n_embd=16, enc_layers=1, dec_layers=1,
                                n_head=2, code_dim=4, states=states))
    m.configure(StageFeatures(codes=True))
    with torch.no_grad():
        m.code_head.weight.normal_(0, 0.3)
    return m.eval()


@pytest.mark.parametrize("states", ["predictive", "content"])
def test_prompted_sampling_keeps_the_known_states_exactly(states):
    model = tiny_model(states)
    S, dim = model.state_dim, model.state_dim + 4
    torch.manual_seed(1)
    cond = prior_for(model, PriorConfig(**SMALL, conditioning="known_mask"), dim, 4).eval()
    plain = prior_for(model, PriorConfig(**SMALL), dim, 4).eval()
    prompt = torch.randint(0, V, (3, 6))  # m = 2 blocks of 3
    with torch.no_grad():
        h, feats = model.encode(prompt)
        want = torch.cat([model.start.expand(3, 1, S), h], 1) if states == "predictive" else h
        codes_want = model.posterior(feats)[0]
    for prior, replace in ((plain, True), (cond, True), (cond, False)):
        st, codes, force, blocks = sample_states(model, prior, 3, generator=torch.Generator().manual_seed(0),
                                                 prompt=prompt, replace=replace)
        assert torch.equal(st[:, :want.shape[1]], want)  # states of the prompt: exactly the encoder's
        assert torch.equal(codes[:, :2], codes_want)
        assert torch.equal(force[:, :6], prompt) and blocks[0].tolist() == [True, True, False, False]
        ids = sample_psf(model, prior, 3, generator=torch.Generator().manual_seed(0), prompt=prompt, replace=replace)
        assert torch.equal(ids[:, :6], prompt)
    a, _, _, _ = sample_states(model, cond, 3, generator=torch.Generator().manual_seed(0), prompt=prompt)
    b, _, _, _ = sample_states(model, cond, 3, generator=torch.Generator().manual_seed(0), prompt=prompt,
                               replace=False)
    assert not torch.equal(a, b)  # replacement changes the unknown states' path
    with pytest.raises(ForethoughtError, match="only through replacement"):
        sample_states(model, plain, 3, prompt=prompt, replace=False)
    wrong = FlowPrior(PriorConfig(**SMALL, conditioning="known_mask"), dim, 4)  # layout not the model's
    with pytest.raises(ValueError, match="prior_for"):
        sample_states(model, wrong, 3, prompt=prompt)


def test_prompted_scores_against_brute_force():
    cfg = PlantedConfig(topics=3, vocab_size=4, topic_vocab=3, blocks=3, block_tokens=2, stay_prob=0.7,
                        concentration=0.5, smoothing=0.05, seed=3)
    gen = build_generator(cfg)
    docs, _ = sample_documents(gen, 5, np.random.default_rng(0))
    for m in (1, 2):
        s = prompted_scores(gen, docs, m)
        tails = np.array(list(itertools.product(range(4), repeat=(3 - m) * 2)))
        for doc, nll in zip(docs, s["continuation_nll"], strict=True):
            full = np.concatenate([np.broadcast_to(doc[:2 * m], (len(tails), 2 * m)), tails], 1)
            log_prompt = np.logaddexp.reduce(log_likelihood(gen, full))  # p(prompt) = sum over continuations
            assert nll == pytest.approx(-(log_likelihood(gen, doc[None])[0] - log_prompt) / ((3 - m) * 2))
        assert ((0 <= s["junction_stay"]) & (s["junction_stay"] <= 1)).all()
    assert np.isnan(prompted_scores(gen, docs, 2)["continuation_persistence"]).all()  # one continued block
    many, _ = sample_documents(gen, 4000, np.random.default_rng(1))
    assert prompted_scores(gen, many, 1)["junction_stay"].mean() == pytest.approx(0.7, abs=0.02)  # tower rule
    with pytest.raises(ForethoughtError, match="nothing to continue"):
        prompted_scores(gen, docs, 3)


def test_bad_conditioning_values_fail_at_load():
    # through the CLI (one line, nothing written): tests/test_bad_inputs_psf.py, with --prompt_replace false on an
    # unconditional prior
    with pytest.raises(ForethoughtError, match="^config key 'prior.model.conditioning' must be one of"):
        load_config(RecipeConfig, cli.resolve_config_path("psf", "recipe", "tiny"),
                    ["--prior.model.conditioning", "prompt"])
    with pytest.raises(ForethoughtError, match="^config key 'prompt_replace'"):
        load_config(SampleConfig, None, ["--recipe_run", "x", "--prompt_replace", "sometimes"])




def test_conditioned_prior_recipe_and_sample_on_the_planted_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    args = ["psf", "recipe", "--config", "tiny", "--run.out_dir", str(tmp_path), "--run.name", "pl",
            "--landing.enabled", "false", "--self_realized.enabled", "false", "--longer_blocks.blocks", "[]",
            "--baselines", "[]", "--prior.model.conditioning", "known_mask", *PLANTED_TINY]
    assert cli.main(args) == 0  # base -> codes (features are cumulative) -> the conditioned prior (+ codes)
    run = tmp_path / "pl"
    art = load_recipe(run)
    assert art.prior.conditioned and art.prior.dim > art.model.state_dim
    assert (art.prior.state_dim, art.prior.prompt_lead) == (art.model.state_dim, 1)
    meta = json.loads(next((run / "prior").glob("step-*/config.json")).read_text())
    assert meta["config"]["conditioning"] == "known_mask" and meta["format_version"] == 1
    for extra, name in (([], "rep"), (["--prompt_replace", "false"], "norep")):
        assert cli.main(["psf", "sample", "--recipe_run", str(run), "--n", "3", "--prompt_blocks", "2",
                         "--name", name, *extra]) == 0
        rows = [json.loads(x) for x in (run / name / "samples.jsonl").read_text().splitlines()]
        windows = art.valid_tokens[:3 * 32].reshape(3, 32)
        assert all(r["tokens"][:16] == windows[i, :16].tolist() for i, r in enumerate(rows))
    assert cli.main(["psf", "sample", "--recipe_run", str(run), "--n", "2", "--name", "free"]) == 0  # zero mask
