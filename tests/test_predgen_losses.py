import pytest
import torch

from forethought.predgen.losses import (
    mix_tokens,
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
    assert all(b >= a - 1e-12 for a, b in zip(ps, ps[1:]))
    assert ps[0] < 0.1 and ps[-1] > 0.9
    assert sampling_probability(0, 100, "linear", start=0.2, end=0.6) == pytest.approx(0.2)


def test_mix_tokens_per_token_and_per_sequence():
    gold = torch.zeros(400, 6, dtype=torch.long)
    pred = torch.ones(400, 6, dtype=torch.long)
    mask = torch.zeros(400, 6, dtype=torch.bool)
    mask[:, 3:] = True
    g = torch.Generator().manual_seed(0)
    mixed = mix_tokens(gold, pred, mask, 0.5, "token", g)
    assert mixed[:, :3].sum() == 0  # prompt positions never replaced
    assert 0.4 < mixed[:, 3:].float().mean() < 0.6
    seq = mix_tokens(gold, pred, mask, 0.5, "sequence", g)[:, 3:]
    assert ((seq.sum(1) == 0) | (seq.sum(1) == 3)).all()  # all or nothing per sequence
    assert torch.equal(mix_tokens(gold, pred, mask, 0.0), gold)
