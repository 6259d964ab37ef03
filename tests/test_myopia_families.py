"""make_myopic across HF families: dispatch by attention class through one table, sliding windows and
soft-capping honoured, attention dropout drawn as the wrapped model draws it, and unsupported classes or attention
kernels refused in one line. (Exactness against the per-position form for every family: test_myopia_attention.py.)"""

import copy

import pytest
import torch
import torch.nn as nn
from transformers import Gemma2Config, Gemma2ForCausalLM, GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

from forethought.core.errors import ForethoughtError
from forethought.models.gpt import GPT, GPTConfig
from forethought.myopia.wrap import FAMILIES, attention_modules, hf_family, make_myopic
from forethought.testing import tiny_gpt_neox, tiny_llama, tiny_opt, tiny_phi

V, T = 37, 12


def _ids(n: int = T) -> torch.Tensor:
    return torch.randint(0, V, (2, n), generator=torch.Generator().manual_seed(1))


def _logits(model, ids):
    if isinstance(model, GPT):
        return model(ids)
    return model(input_ids=ids, use_cache=False).logits


def test_dispatch_is_by_class_not_by_attribute_names():
    class LookAlikeAttention(nn.Module):  # has Llama's attribute names, is not a Llama attention
        def __init__(self):
            super().__init__()
            self.q_proj = self.k_proj = self.v_proj = self.o_proj = nn.Linear(4, 4)
            self.layer_idx, self.head_dim = 0, 2

    with pytest.raises(ForethoughtError, match="no myopic form for LookAlikeAttention"):
        make_myopic(nn.Sequential(LookAlikeAttention()))
    llama = tiny_llama(vocab_size=V, hidden_size=16, layers=2, heads=2, kv_heads=1)
    fams = {f.name for f, _ in attention_modules(llama)}
    assert fams == {"llama"}
    sub = type("MyLlamaAttention", (type(llama.model.layers[0].self_attn),), {})  # a subclass keeps its family
    llama.model.layers[0].self_attn.__class__ = sub
    assert hf_family(llama.model.layers[0].self_attn).name == "llama"
    assert {"gpt_neox", "phi", "opt", "gpt2", "llama", "qwen2", "gemma2"} <= {f.name for f in FAMILIES.values()}


def test_unsupported_attention_kernel_is_refused():
    model = tiny_llama(vocab_size=V, hidden_size=16, layers=1, heads=2, kv_heads=1)
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ForethoughtError, match="attention implementation 'flash_attention_2'"):
        make_myopic(model)


def test_sliding_window_is_applied():
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, use_sliding_window=True, sliding_window=3, max_window_layers=0)
    windowed = Qwen2ForCausalLM(cfg).double().eval()
    for p in windowed.parameters():  # larger weights: sharper attention, so the window matters visibly
        p.data.mul_(4)
    full = copy.deepcopy(windowed)
    for layer in full.model.layers:
        layer.self_attn.sliding_window = None
    full.config.use_sliding_window = False
    full.config.layer_types = ["full_attention"] * 2
    ids = _ids()
    want = _logits(windowed, ids)
    assert (_logits(full, ids) - want).abs().max() > 1e-3  # the window changes the output here
    for mode in ("detach_hidden", "detach_kv"):
        got = _logits(make_myopic(copy.deepcopy(windowed), mode=mode), ids)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_logit_softcapping_is_applied():
    torch.manual_seed(0)
    cfg = Gemma2Config(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=8, sliding_window=64, attn_logit_softcapping=1.0)
    capped = Gemma2ForCausalLM(cfg).double().eval()
    for layer in capped.model.layers:  # large scores, so the cap bites
        layer.self_attn.q_proj.weight.data.mul_(100)
        layer.self_attn.o_proj.weight.data.mul_(30)
    uncapped = copy.deepcopy(capped)
    for layer in uncapped.model.layers:
        layer.self_attn.attn_logit_softcapping = None
    ids = _ids()
    want = _logits(capped, ids)
    assert (_logits(uncapped, ids) - want).abs().max() > 1e-3
    got = _logits(make_myopic(capped, mode="detach_hidden"), ids)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)  # HF's eager softmax runs in float32


def _gpt2_dropout(impl: str):
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=V, n_positions=32, n_embd=16, n_layer=2, n_head=2, attn_pdrop=0.3,
                     resid_pdrop=0.1, embd_pdrop=0.1)
    cfg._attn_implementation = impl
    return GPT2LMHeadModel(cfg).double()


def _gpt_dropout():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=V, n_positions=32, n_embd=16, n_layer=2, n_head=2, dropout=0.1,
                         attn_dropout=0.3)).double()


DROPOUT = {
    "gpt": _gpt_dropout,
    "gpt2-eager": lambda: _gpt2_dropout("eager"),
    "gpt2-sdpa": lambda: _gpt2_dropout("sdpa"),
    "gpt_neox": lambda: tiny_gpt_neox(vocab_size=V, hidden_size=32, layers=2, heads=2, dropout=0.3).double(),
    "phi": lambda: tiny_phi(vocab_size=V, hidden_size=32, layers=2, heads=2, dropout=0.3).double(),
    "opt": lambda: tiny_opt(vocab_size=V, hidden_size=16, layers=2, heads=2, dropout=0.3).double(),
}


@pytest.mark.parametrize("arch", list(DROPOUT))
def test_attention_dropout_as_the_wrapped_model_draws_it(arch):
    """Training mode, dropout on, same RNG state: the myopic forward equals the vanilla forward (and attention
    dropout is really on: another RNG state gives another output)."""
    model = DROPOUT[arch]().train()
    myopic = make_myopic(copy.deepcopy(model), mode="detach_hidden").train()
    ids = _ids()
    torch.manual_seed(5)
    want = _logits(model, ids)
    torch.manual_seed(5)
    got = _logits(myopic, ids)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    torch.manual_seed(6)
    assert (_logits(myopic, ids) - want).abs().max() > 1e-3
    # the dropped-out myopic forward still sends no gradient into earlier positions
    torch.manual_seed(5)
    if isinstance(myopic, GPT):
        logits, hidden = myopic(ids, output_hidden_states=True)
    else:
        out = myopic(input_ids=ids, use_cache=False, output_hidden_states=True)
        logits, hidden = out.logits, out.hidden_states
    loss = torch.nn.functional.cross_entropy(logits[:, -2], ids[:, -1])
    g = torch.autograd.grad(loss, hidden[0])[0]
    assert torch.count_nonzero(g[:, :T - 2]) == 0


def test_attention_dropout_alone_differs_from_vanilla_without_it():
    """Guard for the test above: with attention dropout switched off in the myopic model only, the forwards differ
    (so the equality above is the dropout applied, not dropout being absent in both)."""
    model = _gpt2_dropout("eager").train()
    myopic = make_myopic(copy.deepcopy(model), mode="detach_hidden").train()
    for layer in myopic.transformer.h:
        layer.attn.attn_dropout.p = 0.0
    ids = _ids()
    torch.manual_seed(5)
    want = _logits(model, ids)
    torch.manual_seed(5)
    assert (_logits(myopic, ids) - want).abs().max() > 1e-3


def test_families_verb_every_family_exact(tmp_path, capsys):
    """``myopia families`` through the CLI on a few families with tiny step-cost settings: each exact (forward
    unchanged, no leak, gradients = the per-position form), the worst case kept, and one row per family derived."""
    import json

    from forethought.cli import main
    from forethought.experiments.myopia import families

    argv = ["myopia", "families", "--config", "quick", "--run.device", "cpu", "--families", "[gpt,gpt_neox,gemma2]",
            "--seq_len", "8", "--steps", "1", "--warmup", "0", "--run.out_dir", str(tmp_path), "--run.name", "f"]
    assert main(argv) == 0
    res = json.loads((tmp_path / "f" / "results.json").read_text())
    fams = res["families"]
    assert list(fams) == ["gpt", "gpt_neox", "gemma2"]
    for name, row in fams.items():
        loose = 1e-5 if name == "gemma2" else 1e-12  # HF's float32 softmax inside Gemma 2's eager attention
        assert row["earlier_state_grad_max_abs"] == 0.0, name
        assert row["forward_max_abs_diff"] <= loose and row["param_grad_max_rel_diff"] <= loose, (name, row)
        assert row["step_cost"]["ratio"] > 0 and row["step_cost"]["steps"] == 1
    assert fams["gemma2"]["param_grad_max_rel_diff"] > 0  # the float32 steps are visible: the measure can fail
    assert res["worst"]["param_grad_max_rel_diff"] == max(f["param_grad_max_rel_diff"] for f in fams.values())
    rows = families({"families-s0": {"results": res}}, {})["per_family"]
    assert list(rows) == list(fams) and rows["gemma2"]["step time myopic / vanilla"] == fams["gemma2"][
        "step_cost"]["ratio"]


@pytest.mark.parametrize("flags,message", [(["--families", "[gpt,gpt]"], "at most once"),
                                           (["--families", "[bert]"], "must be one of"),
                                           (["--hidden", "12"], "multiple of 8"),
                                           (["--exact_tokens", "2"], "exact_tokens must be at least 3")])
def test_families_bad_input_is_one_line(tmp_path, capsys, flags, message):
    from forethought.cli import main

    assert main(["myopia", "families", "--run.out_dir", str(tmp_path), "--run.name", "bad", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and not (tmp_path / "bad").exists()
