"""Myopic attention: forward unchanged, zero gradient into earlier positions' states, diagonal gradient equal to
vanilla, and parameter gradients equal to the sum of per-position backward passes (myopic training as defined by
Wu et al. 2024, "Do language models plan for future tokens?")."""

import copy

import pytest
import torch
import torch.nn.functional as F
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from forethought.core.errors import ForethoughtError
from forethought.models.gpt import GPT, GPTConfig
from forethought.myopia.attention import myopic_attention, reference_myopic_attention, vanilla_attention
from forethought.myopia.wrap import make_myopic, per_position_gradient
from forethought.testing import tiny_gpt_neox, tiny_opt, tiny_phi

T, V = 7, 37


def _gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=V, n_positions=16, n_embd=16, n_layer=2, n_head=2)).double()


def _llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    return LlamaForCausalLM(cfg).double().eval()


def _gpt2():
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=V, n_positions=32, n_embd=16, n_layer=2, n_head=2,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg).double().eval()


def _neox():  # Pythia-shaped: parallel residual, rotary on a quarter of each head
    return tiny_gpt_neox(vocab_size=V, hidden_size=32, layers=2, heads=2, max_positions=32).double()


def _phi():  # partial rotary (half of each head), per-head q/k LayerNorms
    return tiny_phi(vocab_size=V, hidden_size=32, layers=2, heads=2, max_positions=32).double()


def _opt():  # pre-scaled queries, learned positions
    return tiny_opt(vocab_size=V, hidden_size=16, layers=2, heads=2, max_positions=32).double()


def _qwen2():  # sliding window of 3 positions in every layer (T = 7: the window bites)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=32, use_sliding_window=True, sliding_window=3,
                      max_window_layers=0)
    return Qwen2ForCausalLM(cfg).double().eval()


def _gemma2():  # attention-logit soft-capping (and a sliding window in its first layer)
    torch.manual_seed(0)
    cfg = Gemma2Config(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=8, sliding_window=3, attn_logit_softcapping=2.0,
                       max_position_embeddings=32)
    return Gemma2ForCausalLM(cfg).double().eval()


# HF's eager Gemma 2 attention takes its softmax in float32 even for a float64 model: its vanilla forward (and the
# per-position oracle built on it) is only float32-exact, so it is compared at that precision.
SLACK = {"gemma2": 1e6}


def _close(arch, a, b, rtol, atol):
    k = SLACK.get(arch, 1.0)
    torch.testing.assert_close(a, b, rtol=rtol * k, atol=atol * k)


BUILDERS = {"gpt": _gpt, "llama": _llama, "gpt2": _gpt2, "gpt_neox": _neox, "phi": _phi, "opt": _opt,
            "qwen2": _qwen2, "gemma2": _gemma2}


def _forward(model, ids, hidden=False):
    if isinstance(model, GPT):
        out = model(ids, output_hidden_states=hidden)
        return out if hidden else (out, None)
    out = model(input_ids=ids, output_hidden_states=hidden, use_cache=False)
    return out.logits, (list(out.hidden_states) if hidden else None)


def _ids():
    return torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(1))


def _per_pos_loss(logits, ids):  # (T-1,) cross-entropy of predicting ids[t+1] at position t
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1), reduction="none").view(2, -1).sum(0)


def test_fast_form_equals_reference_and_vanilla():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 9, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    g = torch.randn(2, 3, 9, 4, dtype=torch.float64)
    outs, grads = [], []
    for fn in (lambda: myopic_attention(q, k, v, k.detach(), v.detach()),
               lambda: reference_myopic_attention(q, k, v, k.detach(), v.detach()),
               lambda: vanilla_attention(q, k, v)):
        o = fn()
        outs.append(o.detach())
        grads.append(torch.autograd.grad((o * g).sum(), (q, k, v)))
    assert torch.equal(outs[0], outs[2])  # bit-identical forward
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=1e-13)
    for a, b in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)
    torch.testing.assert_close(grads[0][0], grads[2][0])  # q's gradient is the same as vanilla's
    assert (grads[0][1] - grads[2][1]).abs().max() > 1e-3  # k's is not


@pytest.mark.parametrize("arch", list(BUILDERS))
@pytest.mark.parametrize("mode", ["detach_hidden", "detach_kv"])
def test_forward_unchanged(arch, mode):
    ids = _ids()
    model = BUILDERS[arch]()
    ref, _ = _forward(model, ids)
    make_myopic(model, mode=mode)
    out, _ = _forward(model, ids)
    _close(arch, out, ref, rtol=0, atol=1e-12)
    make_myopic(model, mode="vanilla")
    torch.testing.assert_close(_forward(model, ids)[0], ref, rtol=0, atol=0)


@pytest.mark.parametrize("arch", list(BUILDERS))
@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_no_gradient_into_earlier_states(arch, impl):
    """For every t, every layer, every s < t: d loss_t / d h_s is exactly zero in myopic, not in vanilla; and
    d loss_t / d h_t (the diagonal) equals vanilla's."""
    ids = _ids()
    vanilla = BUILDERS[arch]()
    myopic = make_myopic(BUILDERS[arch](), mode="detach_hidden", implementation=impl)
    for t in range(1, T - 1):
        gv, gm = [], []
        for model, store in ((vanilla, gv), (myopic, gm)):
            logits, hidden = _forward(model, ids, hidden=True)
            states = hidden[:-1]  # block inputs (the last entry may be after the final norm)
            store.extend(torch.autograd.grad(_per_pos_loss(logits, ids)[t], states))
        for layer, (a, b) in enumerate(zip(gv, gm, strict=True)):
            assert torch.count_nonzero(b[:, :t]) == 0, (arch, t, layer)
            if layer > 0:
                assert a[:, :t].abs().max() > 0, (arch, t, layer)
            _close(arch, b[:, t], a[:, t], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("arch", list(BUILDERS))
def test_param_grads_equal_sum_of_per_position_passes(arch):
    ids = _ids()
    model = BUILDERS[arch]()
    params = [p for p in model.parameters() if p.requires_grad]
    oracle = per_position_gradient(model, lambda: _per_pos_loss(_forward(model, ids)[0], ids), params, T - 1)
    make_myopic(model, mode="detach_hidden")
    logits, _ = _forward(model, ids)
    one_pass = torch.autograd.grad(_per_pos_loss(logits, ids).sum(), params, allow_unused=True)
    for p, a, b in zip(params, oracle, one_pass, strict=True):
        _close(arch, b if b is not None else torch.zeros_like(p), a, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("arch", list(BUILDERS))
def test_beta_dial_and_detach_kv(arch):
    ids = _ids()
    vanilla = BUILDERS[arch]()
    lv = _per_pos_loss(_forward(vanilla, ids)[0], ids).sum()
    gv = torch.autograd.grad(lv, list(vanilla.parameters()), allow_unused=True)
    full = make_myopic(BUILDERS[arch](), mode="detach_kv", beta=1.0)  # beta = 1: vanilla gradients
    gb = torch.autograd.grad(_per_pos_loss(_forward(full, ids)[0], ids).sum(), list(full.parameters()),
                             allow_unused=True)
    for a, b in zip(gv, gb, strict=True):
        if a is not None:
            _close(arch, b, a, rtol=1e-9, atol=1e-11)
    half = make_myopic(BUILDERS[arch](), mode="detach_hidden", beta=0.5)
    logits, hidden = _forward(half, ids, hidden=True)
    g = torch.autograd.grad(_per_pos_loss(logits, ids)[T - 2], hidden[:-1])
    assert g[0][:, :T - 2].abs().max() > 0  # some gradient reaches the past again


@pytest.mark.parametrize("arch", list(BUILDERS))
def test_zero_past_sees_only_current_token(arch):
    ids = _ids()
    model = make_myopic(BUILDERS[arch](), mode="zero_past")
    ids2 = ids.clone()
    ids2[:, :3] = (ids2[:, :3] + 1) % V  # change the past
    a, _ = _forward(model, ids)
    b, _ = _forward(model, ids2)
    torch.testing.assert_close(a[:, 3:], b[:, 3:], rtol=0, atol=1e-12)


@pytest.mark.parametrize("arch", list(BUILDERS))
def test_local_myopic_uses_frozen_states(arch):
    ids = _ids()
    frozen = BUILDERS[arch]()
    model = make_myopic(BUILDERS[arch](), mode="local", frozen=frozen)
    ref = _forward(frozen, ids)[0]
    _close(arch, _forward(model, ids)[0], ref, rtol=0, atol=1e-10)  # same weights: same output
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    logits, hidden = _forward(model, ids, hidden=True)
    g = torch.autograd.grad(_per_pos_loss(logits, ids)[T - 2], hidden[:-1])
    assert all(torch.count_nonzero(x[:, :T - 2]) == 0 for x in g)
    assert not any(n.startswith("_forethought") for n in model.state_dict())


def test_local_myopic_reference_form_reads_the_frozen_residual_before_layernorm():
    ids = _ids()
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=V, n_positions=16, n_embd=16, n_layer=2, n_head=2, dropout=0.2)
    frozen, model, ours = GPT(cfg).double(), GPT(cfg).double(), GPT(cfg).double()
    model.load_state_dict(frozen.state_dict())
    ours.load_state_dict(frozen.state_dict())
    make_myopic(model, mode="local", frozen=frozen, local_form="reference")
    make_myopic(ours, mode="local", frozen=copy.deepcopy(frozen))
    seen = {}
    for i, block in enumerate(frozen.h):  # each block's input: the residual before its LayerNorm
        block.register_forward_pre_hook(lambda m, a, i=i: seen.__setitem__(i, a[0]))
    model.eval()
    out = model(ids)
    spec = model.h[0].attn._forethought_myopia
    assert all(torch.equal(spec.frozen_inputs[i], seen[i]) for i in range(cfg.n_layer)) and not frozen.training
    # same weights: ours (the attention inputs, after the LayerNorm) is the vanilla forward; the reference's is not
    vanilla = GPT(cfg).double().eval()
    vanilla.load_state_dict(frozen.state_dict())
    torch.testing.assert_close(ours.eval()(ids), vanilla(ids), rtol=0, atol=1e-10)
    assert (out - vanilla(ids)).abs().max() > 1e-3
    # while training, the frozen model runs in train mode (its dropout on), as in the reference code
    model.train()
    model(ids)
    first = spec.frozen_inputs[0].clone()
    model(ids)
    assert frozen.training and not torch.equal(first, spec.frozen_inputs[0])
    # and still no gradient from a position's loss into earlier positions' states
    model.eval()
    logits, hidden = _forward(model, ids, hidden=True)
    g = torch.autograd.grad(_per_pos_loss(logits, ids)[T - 2], hidden[:-1])
    assert all(torch.count_nonzero(x[:, :T - 2]) == 0 for x in g)
    with pytest.raises(ForethoughtError, match="our GPT only"):
        make_myopic(_gpt2(), mode="local", frozen=_gpt2(), local_form="reference")


def test_bad_mode_errors():
    with pytest.raises(ForethoughtError, match="unknown myopia mode"):
        make_myopic(_gpt(), mode="bogus")
    with pytest.raises(ForethoughtError, match="frozen"):
        make_myopic(_gpt(), mode="local")
    with pytest.raises(ForethoughtError, match="no supported attention"):
        make_myopic(torch.nn.Linear(2, 2))
