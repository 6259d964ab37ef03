"""forethought.psf.token_flow: the token-level flow baseline on tiny random models — the table flow (TABLE_FLOW)
and ELF-B's recipe (contextual latents, the decoder branch, logit-normal time, self-conditioning and its
guidance, the SDE sampler)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from forethought.core.errors import ForethoughtError
from forethought.core.run import Run
from forethought.core.runtime import compute_init
from forethought.core.trainer import TrainConfig
from forethought.eval.cost import count_forward_calls
from forethought.models.gpt import GPT, GPTConfig
from forethought.psf.prior import logit_normal_t
from forethought.psf.token_flow import (
    TABLE_FLOW,
    TokenFlow,
    TokenFlowConfig,
    contextual_latents,
    embedding_table,
    log_uniform_guidance,
    normalise_table,
    sample_token_flow,
    sampling_times,
    sde_back,
    token_flow_loss,
    train_token_flow,
)
from forethought.testing import tiny_llama

V, D, L = 40, 16, 12


def _ar() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=V, n_positions=L, n_embd=D, n_layer=1, n_head=2))


def _flow(**kw) -> TokenFlow:
    """A tiny table flow (the earlier baseline's settings) unless ``kw`` says otherwise."""
    ar = _ar()
    cfg = TokenFlowConfig(seq_len=L, n_embd=32, n_layer=2, n_head=4, time_dim=8, steps=4, **{**TABLE_FLOW, **kw})
    return TokenFlow(cfg, embedding_table(ar))


def _elf(**kw) -> TokenFlow:
    """A tiny flow with ELF-B's defaults (contextual latents)."""
    ar = _ar()
    return TokenFlow(TokenFlowConfig(seq_len=L, n_embd=32, n_layer=2, n_head=4, time_dim=8, steps=4, **kw),
                     embedding_table(ar))


def test_table_is_frozen_centred_and_normalised() -> None:
    table = normalise_table(torch.randn(V, D) + 3.0)
    assert torch.allclose(table.norm(dim=1), torch.full((V,), D ** 0.5), atol=1e-4)
    model = _flow()
    assert "table" in dict(model.named_buffers()) and all(p is not model.table for p in model.parameters())
    assert model.num_params() == sum(p.numel() for p in model.net.parameters())
    hf = embedding_table(tiny_llama(vocab_size=50, hidden_size=32, layers=1, heads=4))
    assert hf.shape == (50, 32)


def test_config_checks() -> None:
    with pytest.raises(ForethoughtError):
        _flow(head="embedding", rounding="lm_head")
    for bad in ({"head": "logits"}, {"rounding": "nearest"}, {"decoder_prob": 0.0}, {"self_cond": False},
                {"decoder_prob": 1.0}, {"guidance_max": 0.1}):
        with pytest.raises(ForethoughtError):  # contextual latents need x̂ directly and the decoder to round
            _elf(**bad)
    defaults = TokenFlowConfig()  # ELF-B's values (train_owt_ELF-B.yml, uncond_sampling_configs.yml)
    assert (defaults.time_mu, defaults.time_sigma, defaults.noise_scale, defaults.min_gap) == (-1.5, 0.8, 2.0, 0.05)
    assert (defaults.decoder_prob, defaults.decoder_noise_scale, defaults.decoder_time_mu,
            defaults.decoder_time_sigma) == (0.2, 5.0, 0.8, 0.8)
    assert (defaults.self_cond_prob, defaults.guidance_min, defaults.guidance_max, defaults.guidance_scale) == (
        0.5, 0.5, 5.0, 3.0)
    assert (defaults.sampler, defaults.sde_gamma, defaults.steps, defaults.sample_schedule) == (
        "sde", 1.5, 32, "logit_normal")
    assert (defaults.latents, defaults.head, defaults.rounding) == ("contextual", "embedding", "decoder")


@pytest.mark.parametrize("head, rounding", [("logits", "lm_head"), ("embedding", "nearest")])
def test_loss_finite_and_decreases_on_a_fixed_batch(head: str, rounding: str) -> None:
    model = _flow(head=head, rounding=rounding)
    tokens = torch.randint(0, V, (8, L), generator=torch.Generator().manual_seed(1))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(2)

    def eval_loss() -> float:  # the same noise/times every time, so the numbers compare
        with torch.no_grad():
            return token_flow_loss(model, tokens, generator=torch.Generator().manual_seed(99))[0].item()

    before = eval_loss()
    for _ in range(30):
        loss, metrics = token_flow_loss(model, tokens, generator=g)
        assert torch.isfinite(loss) and "flow" in metrics
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert eval_loss() < 0.8 * before


def test_sampler_shape_ids_steps_and_determinism() -> None:
    model = _flow()
    with count_forward_calls(model) as calls:
        ids = sample_token_flow(model, 5, steps=3, generator=torch.Generator().manual_seed(0), batch_size=3)
    assert ids.shape == (5, L) and ids.dtype == torch.long
    assert int(ids.min()) >= 0 and int(ids.max()) < V
    assert calls[0] == 2 * 3  # two batches, 3 sequential passes each: serial depth = steps
    again = sample_token_flow(model, 5, steps=3, generator=torch.Generator().manual_seed(0), batch_size=3)
    assert torch.equal(ids, again)
    hot = sample_token_flow(model, 5, generator=torch.Generator().manual_seed(0), temperature=1.0)
    nearest = sample_token_flow(_flow(head="embedding", rounding="nearest"), 2)
    assert hot.shape == (5, L) and nearest.shape == (2, L) and int(nearest.max()) < V


def test_self_conditioning_input_changes_the_output() -> None:
    model = _flow()
    x_t, t = torch.randn(2, L, D), torch.full((2,), 0.5)
    with torch.no_grad():
        a, _ = model(x_t, t, None)
        b, _ = model(x_t, t, torch.randn(2, L, D))
    assert not torch.allclose(a, b)
    no_sc = _flow(self_cond=False)
    assert no_sc.net.config.input_dim == D + 8


def test_train_token_flow_through_the_trainer(tmp_path: Path) -> None:
    model = _flow()
    tokens = torch.randint(0, V, (16, L), generator=torch.Generator().manual_seed(3))
    cfg = TrainConfig(steps=3, batch_size=4, lr=1e-3, log_every=1)
    out = train_token_flow(model, tokens, cfg, Run.create(tmp_path, "tf"), compute_init("cpu", seed=0))
    assert out["steps"] == 3 and len(out["curve"]) == 3
    assert (tmp_path / "tf" / "step-000003").is_dir()


def test_entropy_knobs_move_the_unigram_entropy_of_a_trained_flow() -> None:
    """On a tiny flow trained on the planted corpus (seconds), the last-step temperature barely moves the samples'
    entropy (the final logits are nearly one-hot), the step temperature moves it both ways (> 1 down, < 1 up) and
    SDE noise down, monotonically on these grids."""
    from forethought.data.planted import PlantedConfig, planted_split
    from forethought.eval.judge import mean_unigram_entropy

    pc = PlantedConfig(blocks=4, block_tokens=8, vocab_size=32, topic_vocab=12, topics=4, train_documents=1000)
    docs = torch.from_numpy(planted_split(pc, "train").astype("int64")).view(-1, 32)
    torch.manual_seed(0)
    ar = GPT(GPTConfig(vocab_size=32, n_positions=32, n_embd=16, n_layer=1, n_head=2))
    model = TokenFlow(TokenFlowConfig(seq_len=32, n_embd=32, n_layer=1, n_head=2, time_dim=8, steps=8,
                                      **TABLE_FLOW), embedding_table(ar))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for _ in range(200):
        loss, _ = token_flow_loss(model, docs[torch.randint(len(docs), (32,), generator=g)], generator=g)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def entropy(temperature: float = 1.0, **knobs: float) -> float:
        ids = sample_token_flow(model, 64, generator=torch.Generator().manual_seed(0), temperature=temperature,
                                **knobs)
        return mean_unigram_entropy(ids.tolist())

    plain = entropy()
    assert entropy(step_temperature=1.0, noise=0.0) == plain  # the neutral knobs are the plain ODE sampler
    by_tau = [entropy(step_temperature=tau) for tau in (0.5, 1.0, 1.5, 2.0)]
    by_noise = [entropy(noise=eta) for eta in (0.0, 0.5, 1.0)]
    last = [entropy(temperature=t) for t in (0.5, 1.0)]
    print(f"step temperature 0.5/1/1.5/2: {by_tau}; noise 0/0.5/1: {by_noise}; last-step temperature 0.5/1: {last}")
    assert all(a - b > 0.02 for a, b in zip(by_tau, by_tau[1:], strict=False)), by_tau
    assert all(a - b > 0.02 for a, b in zip(by_noise, by_noise[1:], strict=False)), by_noise
    assert abs(last[0] - last[1]) < 0.02  # the old knob: the final temperature hardly matters
    with pytest.raises(ForethoughtError):
        sample_token_flow(model, 2, step_temperature=0.0)
    with pytest.raises(ForethoughtError):
        sample_token_flow(model, 2, noise=-1.0)


def test_time_sampler_is_logit_normal_at_elfs_values_and_the_sampling_times_too() -> None:
    t = logit_normal_t(20_000, -1.5, 0.8, generator=torch.Generator().manual_seed(0)).double()
    logit = torch.log(t / (1 - t))
    assert abs(float(logit.mean()) + 1.5) < 0.03 and abs(float(logit.std()) - 0.8) < 0.03
    cfg = TokenFlowConfig(steps=33)
    times = sampling_times(33, cfg, torch.Generator().manual_seed(1))
    assert times[0] == 0.0 and times[-1] == 1.0 and len(times) == 34 and times == sorted(times)
    inner = torch.tensor(times[1:-1]).double()
    assert abs(float(torch.log(inner / (1 - inner)).median()) + 1.5) < 0.5  # the bulk at low signal
    assert sampling_times(4, TokenFlowConfig(sample_schedule="uniform")) == [0, 0.25, 0.5, 0.75, 1.0]
    w = log_uniform_guidance(10_000, 0.5, 5.0, torch.Generator().manual_seed(2))
    assert float(w.min()) >= 0.5 and float(w.max()) <= 5.0
    assert float(torch.log1p(w).mean()) == pytest.approx((math.log(1.5) + math.log(6.0)) / 2, abs=0.02)


def test_sde_step_moves_back_with_fresh_noise() -> None:
    z, eps = torch.full((1, 2, 3), 2.0), torch.full((1, 2, 3), -1.0)
    zb, tb = sde_back(z, 0.4, 0.6, 1.5, eps)  # alpha = 1 - 1.5 * 0.2 = 0.7
    assert tb == pytest.approx(0.28) and torch.allclose(zb, torch.full_like(z, 0.7 * 2 - 0.3))
    same, t = sde_back(z, 0.4, 0.6, 0.0, eps)
    assert t == 0.4 and torch.equal(same, z)
    assert sde_back(z, 0.1, 0.9, 10.0, eps)[1] == 0.0  # alpha clipped at 0: pure noise at t = 0


class Recorder:
    """Wraps a flow's forward: records each call's (t, self_cond, decode) and answers the exact denoiser of a
    point mass at table row ``k`` (x̂ = that row whatever the input)."""

    def __init__(self, model: TokenFlow, k: int):
        self.model, self.k, self.calls = model, k, []
        self.forward = model.forward

    def __call__(self, x_t, t, self_cond=None, guidance=None, decode=False):
        x_hat, logits = self.forward(x_t, t, self_cond, guidance, decode)
        exact = self.model.table[self.k].expand_as(x_t).clone()
        self.calls.append((float(t[0]), None if self_cond is None else self_cond.clone(), decode, exact))
        return exact, (logits if decode else None)


def test_sde_sampler_self_conditions_on_the_previous_estimate_and_lands_on_an_exact_denoiser(monkeypatch) -> None:
    model = _flow(head="embedding", rounding="nearest", sampler="sde", sample_schedule="uniform", sde_gamma=1.5)
    rec = Recorder(model, k=7)
    monkeypatch.setattr(model, "forward", rec)
    ids = sample_token_flow(model, 3, steps=4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(ids, torch.full((3, L), 7))  # every step's churn undone: the last step lands on x̂
    ts = [c[0] for c in rec.calls]
    alpha = 1 - 1.5 * 0.25
    assert ts == pytest.approx([0.0, alpha * 0.25, alpha * 0.5, 0.75])  # moved back except at the last step
    assert rec.calls[0][1] is None  # zeros at the first step, then the previous step's estimate
    for prev, cur in zip(rec.calls, rec.calls[1:], strict=False):
        assert torch.equal(cur[1], prev[3])


def test_elf_flow_trains_both_branches_and_rounds_with_its_decoder() -> None:
    ar = _ar()
    model = _elf()
    tokens = torch.randint(0, V, (8, L), generator=torch.Generator().manual_seed(1))
    latents = contextual_latents(ar, tokens)
    assert latents.shape == (8, L, D)
    # contextual: position i has read tokens up to i, not after
    other = tokens.clone()
    other[:, 5:] = (other[:, 5:] + 1) % V
    assert torch.allclose(contextual_latents(ar, other)[:, :5], latents[:, :5], atol=1e-5)
    assert not torch.allclose(contextual_latents(ar, other)[:, 5], latents[:, 5])
    # latent_layer: 0 is the embeddings (position i reads token i only), k the stream after block k
    emb = contextual_latents(ar, tokens, 0)
    assert torch.allclose(emb, ar.wte(tokens) + ar.wpe(torch.arange(L)), atol=1e-6)
    assert not torch.allclose(contextual_latents(ar, tokens, 1), emb)
    with pytest.raises(ForethoughtError, match="latent_layer must be -1 or 0.."):
        contextual_latents(ar, tokens, ar.config.n_layer + 1)
    with pytest.raises(ForethoughtError):
        token_flow_loss(model, tokens)  # contextual latents must be given
    seen = set()
    g = torch.Generator().manual_seed(3)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(40):
        loss, metrics = token_flow_loss(model, tokens, generator=g, latents=latents)
        seen |= set(metrics)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert {"flow", "decoder_ce"} <= seen  # a fifth of the steps train the decoder branch
    # the decoder mode reads its flag, and the guidance scale is an input
    x = torch.randn(2, L, D)
    with torch.no_grad():
        a, logits = model(x, torch.ones(2), None, None, decode=True)
        b, none = model(x, torch.ones(2))
        c, _ = model(x, torch.ones(2), None, torch.full((2,), 1.0))
    assert logits.shape == (2, L, V) and none is None and not torch.allclose(a, b) and not torch.allclose(b, c)
    with count_forward_calls(model) as calls:
        ids = sample_token_flow(model, 2, generator=torch.Generator().manual_seed(0))
    assert ids.shape == (2, L) and calls[0] == 4 + 1  # steps, then the decoder pass
    with pytest.raises(ForethoughtError):
        sample_token_flow(model, 2, step_temperature=2.0)  # no logits head


def test_a_flow_saved_before_elfs_settings_loads_as_the_table_flow(tmp_path: Path) -> None:
    from dataclasses import asdict

    from forethought.core.checkpoint import save_checkpoint
    from forethought.psf.token_flow import MODEL_TYPE, load_token_flow

    model = _flow()  # the table flow
    old = {k: v for k, v in asdict(model.config).items() if k in (
        "seq_len", "n_embd", "n_layer", "n_head", "head", "rounding", "self_cond", "self_cond_prob", "time_dim",
        "time_mu", "time_sigma", "min_gap", "ce_weight", "steps")}  # the keys an earlier version saved
    record = {**model.config_dict(), "config": old}
    assert record["model_type"] == MODEL_TYPE
    save_checkpoint(tmp_path, 1, model, {}, model_config=record)
    loaded, _ = load_token_flow(tmp_path)
    assert loaded.config == model.config  # read with the table flow's settings, not ELF-B's defaults
    ids = sample_token_flow(loaded, 2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(ids, sample_token_flow(model, 2, generator=torch.Generator().manual_seed(0)))
