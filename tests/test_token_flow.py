"""forethought.psf.token_flow: the ELF-style token-level flow baseline, on tiny random models."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from forethought.core.errors import ForethoughtError
from forethought.core.run import Run
from forethought.core.runtime import compute_init
from forethought.core.trainer import TrainConfig
from forethought.eval.cost import count_forward_calls
from forethought.models.gpt import GPT, GPTConfig
from forethought.psf.token_flow import (
    TokenFlow,
    TokenFlowConfig,
    embedding_table,
    normalise_table,
    sample_token_flow,
    token_flow_loss,
    train_token_flow,
)
from forethought.testing import tiny_llama

V, D, L = 40, 16, 12


def _flow(**kw) -> TokenFlow:
    torch.manual_seed(0)
    ar = GPT(GPTConfig(vocab_size=V, n_positions=L, n_embd=D, n_layer=1, n_head=2))
    cfg = TokenFlowConfig(seq_len=L, n_embd=32, n_layer=2, n_head=4, time_dim=8, steps=4, **kw)
    return TokenFlow(cfg, embedding_table(ar))


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
    model = TokenFlow(TokenFlowConfig(seq_len=32, n_embd=32, n_layer=1, n_head=2, time_dim=8, steps=8),
                      embedding_table(ar))
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
    assert all(a - b > 0.02 for a, b in zip(by_tau, by_tau[1:])), by_tau
    assert all(a - b > 0.02 for a, b in zip(by_noise, by_noise[1:])), by_noise
    assert abs(last[0] - last[1]) < 0.02  # the old knob: the final temperature hardly matters
    with pytest.raises(ForethoughtError):
        sample_token_flow(model, 2, step_temperature=0.0)
    with pytest.raises(ForethoughtError):
        sample_token_flow(model, 2, noise=-1.0)
