import pytest
import torch

from forethought.predgen.losses import (
    mix_tokens,
    replace_mask,
    sample_by_uniform,
    sampling_probability,
    wdal_paper,
    wdal_paper_literal,
    wdal_reference,
    wdal_reference_literal,
)


def test_wdal_paper_identity_and_gradient():
    lw = torch.tensor([0.3, 2.0, 1e-3, 5.0], dtype=torch.float64, requires_grad=True)
    ld = torch.tensor([1.7, 0.4, 2.5, 5.0], dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(wdal_paper(lw, ld), wdal_paper_literal(lw, ld))
    gw, gd = torch.autograd.grad(wdal_paper(lw, ld).sum(), (lw, ld))
    torch.testing.assert_close(gw, ld.detach())  # the writer's gradient is weighted by the director's loss
    torch.testing.assert_close(gd, lw.detach())


def test_wdal_safe_near_zero():
    z = torch.zeros(2, requires_grad=True)
    one = torch.ones(2, requires_grad=True)
    for fn in (wdal_paper, wdal_reference):
        out = fn(z, one).sum()
        g = torch.autograd.grad(out, (z, one))
        assert torch.isfinite(out) and all(torch.isfinite(x).all() for x in g)


def test_wdal_reference_identity():
    lw = torch.tensor([0.0, 0.3, 2.0, 7.0], dtype=torch.float64)
    ld = torch.tensor([0.5, 1.7, 0.4, 7.0], dtype=torch.float64)
    torch.testing.assert_close(wdal_reference(lw, ld), wdal_reference_literal(lw, ld))


@pytest.mark.parametrize("schedule", ["linear", "exponential", "inverse_sigmoid"])
def test_schedules_monotone_from_start_to_end(schedule):
    ps = [sampling_probability(s, 100, schedule) for s in range(0, 101)]
    assert all(b >= a - 1e-12 for a, b in zip(ps, ps[1:], strict=False))
    assert ps[0] < 0.1 and ps[-1] > 0.9
    assert sampling_probability(0, 100, "linear", start=0.2, end=0.6) == pytest.approx(0.2)


def test_mix_tokens_per_token_and_per_sequence():
    gold = torch.zeros(400, 6, dtype=torch.long)
    pred = torch.ones(400, 6, dtype=torch.long)
    mask = torch.zeros(400, 6, dtype=torch.bool)
    mask[:, 3:] = True
    u = torch.rand(400, 6, generator=torch.Generator().manual_seed(0))
    mixed = mix_tokens(gold, pred, mask, 0.5, "token", u)
    assert mixed[:, :3].sum() == 0  # prompt positions never replaced
    assert 0.4 < mixed[:, 3:].float().mean() < 0.6
    assert torch.equal(mixed[:, 3:].bool(), u[:, 3:] < 0.5)  # a token is replaced where its uniform is below p
    seq = mix_tokens(gold, pred, mask, 0.5, "sequence", u)[:, 3:]
    assert ((seq.sum(1) == 0) | (seq.sum(1) == 3)).all()  # all or nothing per sequence
    assert torch.equal(seq[:, 0].bool(), u[:, 0] < 0.5)
    assert torch.equal(mix_tokens(gold, pred, mask, 0.0), gold)
    # a row's coins travel with it: mixing a slice of the batch gives that slice of the mixed batch
    assert torch.equal(mix_tokens(gold[200:], pred[200:], mask[200:], 0.5, "token", u[200:]), mixed[200:])


def test_replace_mask_per_batch_is_one_coin_for_every_row():
    mask = torch.ones(50, 4, dtype=torch.bool)
    mask[:, 3] = False  # e.g. a short answer's padding: never replaced
    u = torch.rand(50, 4, generator=torch.Generator().manual_seed(1))
    heads = replace_mask(mask, 0.3, "batch", u, batch_coin=0.29)
    assert torch.equal(heads, mask)  # the coin is below p: every answer input of the batch is the model's
    assert not replace_mask(mask, 0.3, "batch", u, batch_coin=0.31).any()  # above p: none (the row uniforms unread)
    assert not replace_mask(mask, 0.0, "batch", u, batch_coin=0.0).any()
    with pytest.raises(ValueError, match="batch_coin"):
        replace_mask(mask, 0.3, "batch", u)
    # the reference's ramp: linear to p_end over the ramp, then p_end
    assert [sampling_probability(s, 500, "linear") for s in (250, 500, 800)] == [0.5, 1.0, 1.0]


def test_sample_by_uniform_inverts_the_cdf():
    probs = torch.tensor([0.2, 0.0, 0.5, 0.3], dtype=torch.float64).expand(5, 4)
    u = torch.tensor([0.0, 0.19, 0.25, 0.69, 0.999], dtype=torch.float64)
    assert sample_by_uniform(probs, u).tolist() == [0, 0, 2, 2, 3]  # index 1 (probability 0) never drawn
    g = torch.Generator().manual_seed(0)
    draws = sample_by_uniform(probs[:1].expand(20000, 4), torch.rand(20000, generator=g, dtype=torch.float64))
    freq = torch.bincount(draws, minlength=4).double() / 20000
    assert torch.allclose(freq, probs[0], atol=0.015)
