import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from forethought.models.gpt import GPT, GPTConfig, block_causal_mask, from_hf_gpt2


@pytest.mark.parametrize("act", ["gelu_new", "relu"])
def test_parity_with_hf_gpt2(act):
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=101, n_positions=32, n_embd=32, n_layer=3, n_head=4,
                                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                    activation_function=act)).eval()
    ours = from_hf_gpt2(hf).eval()
    assert ours.config.activation == act
    ids = torch.randint(0, 101, (3, 20))
    torch.testing.assert_close(ours(ids), hf(input_ids=ids).logits, rtol=1e-5, atol=1e-5)


def test_block_causal_mask_and_attention():
    m = block_causal_mask(6, 2)
    assert m.tolist()[0] == [True, True, False, False, False, False]
    assert m.tolist()[3] == [True, True, True, True, False, False]
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, n_positions=8, n_embd=8, n_layer=1, n_head=2,
                          attention="block_causal", block_size=2)).double()
    ids = torch.randint(0, 11, (1, 6))
    logits = model(ids)
    # Gradient of position 2's output with respect to each position's input vector (not the tied table, whose
    # gradient is never zero): block-causal with block 2 means positions 0..3 reach it and 4..5 do not.
    emb = model.wte(ids).detach().requires_grad_(True)
    (g,) = torch.autograd.grad(model(None, inputs_embeds=emb)[0, 2].sum(), emb)
    reach = g[0].abs().sum(-1)  # (T,)
    assert (reach[:4] > 0).all() and (reach[4:] == 0).all(), reach
    changed = ids.clone()
    changed[0, 3] = (changed[0, 3] + 1) % 11  # same block as position 2: visible
    assert not torch.allclose(model(changed)[0, 2], logits[0, 2])
    changed = ids.clone()
    changed[0, 4] = (changed[0, 4] + 1) % 11  # next block: invisible
    torch.testing.assert_close(model(changed)[0, 2], logits[0, 2])


def test_continuous_inputs_and_regression_head():
    model = GPT(GPTConfig(n_positions=16, n_embd=16, n_layer=2, n_head=2, input_dim=2, output_dim=1))
    out, hidden = model(torch.randn(4, 16, 2), output_hidden_states=True)
    assert out.shape == (4, 16, 1) and len(hidden) == 3 and hidden[0].shape == (4, 16, 16)


def test_final_norm_and_init_settings():
    base = dict(n_positions=8, n_embd=64, n_layer=2, n_head=2, input_dim=2, output_dim=1)
    torch.manual_seed(0)
    gpt2 = GPT(GPTConfig(**base))
    torch.manual_seed(0)
    plain = GPT(GPTConfig(**base, final_norm=False, init="torch"))
    # no final norm: the head reads the last residual stream as it is
    x = torch.randn(3, 8, 2)
    out, hidden = plain(x, output_hidden_states=True)
    torch.testing.assert_close(out, plain.head(hidden[-1]))
    assert not any(k.startswith("ln_f") for k in plain.state_dict())
    # torch init: Kaiming-uniform linear layers (std 1/sqrt(3·fan_in)), non-zero biases; the embeddings are the
    # same draws as under GPT-2's init
    fc = plain.h[0].mlp.c_fc
    assert abs(fc.weight.std().item() - 1 / (3 * 64) ** 0.5) < 0.005 and fc.bias.abs().sum() > 0
    assert abs(gpt2.h[0].mlp.c_fc.weight.std().item() - 0.02) < 0.002 and gpt2.h[0].mlp.c_fc.bias.abs().sum() == 0
    assert torch.equal(plain.wpe.weight, gpt2.wpe.weight)
    # a tied LM head stays tied (it is the embedding table, not a linear layer to re-initialise)
    lm = GPT(GPTConfig(vocab_size=11, n_positions=8, n_embd=8, n_layer=1, n_head=2, init="torch"))
    assert lm.head.weight is lm.wte.weight and abs(lm.wte.weight.std().item() - 0.02) < 0.01


def test_final_norm_and_init_from_the_command_line():
    from forethought.core.config import load_config
    from forethought.myopia.synthetic import SyntheticConfig

    cfg = load_config(SyntheticConfig, None, ["--model.final_norm", "false", "--model.init", "torch"])
    assert cfg.model.final_norm is False and cfg.model.init == "torch"


def compositions(n: int, parts_of: int = 1) -> list[tuple[int, ...]]:
    """Every way to write n as an ordered sum of positive multiples of ``parts_of``."""
    if n == 0:
        return [()]
    return [(c,) + rest for c in range(parts_of, n + 1, parts_of) for rest in compositions(n - c, parts_of)]


@pytest.mark.parametrize("attention,unit", [("causal", 1), ("block_causal", 2)])
def test_kv_cache_identical_logits_for_every_chunking(attention, unit):
    """The preallocated cache: every chunking of the same 8 positions (all 128 for causal attention, all whole-block
    ones for block-causal) gives the full pass's logits; the storage is allocated once and written in place."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=37, n_positions=12, n_embd=16, n_layer=2, n_head=2, attention=attention,
                          block_size=2)).double().eval()
    ids = torch.randint(0, 37, (2, 8))
    full = model(ids)
    ways = compositions(8, unit)
    assert len(ways) == (128 if unit == 1 else 8)
    for chunks in ways:
        cache = model.new_cache(8)
        parts, start, ptr = [], 0, None
        for c in chunks:
            parts.append(model(ids[:, start:start + c], kv_cache=cache))
            start += c
            ptr = ptr or cache.k[0].data_ptr()
            assert cache.k[0].data_ptr() == ptr and cache.k[0].shape[2] == 8  # no reallocation, no growth
        assert cache.length == 8
        torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-10, atol=1e-10, msg=str(chunks))


def test_kv_cache_capacity():
    model = GPT(GPTConfig(vocab_size=37, n_positions=12, n_embd=16, n_layer=1, n_head=2)).eval()
    assert model.new_cache().capacity == 12 and model.new_cache(5).capacity == 5
    assert model.new_cache(50).capacity == 12  # never more than the position table
    cache = model.new_cache(5)
    model(torch.zeros(1, 4, dtype=torch.long), kv_cache=cache)
    with pytest.raises(ValueError, match="cannot take 6"):
        model(torch.zeros(1, 2, dtype=torch.long), kv_cache=cache)
