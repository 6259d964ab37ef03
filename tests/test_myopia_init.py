"""`model.init reference`: the myopia paper's synthetic model (an HF GPT-2 body whose input layer Linear(2, d) and
head Linear(d, 1) are swapped in after the body's init, so they keep PyTorch's default init)."""

import math

import pytest
import torch

from forethought.cli import CONFIG_DIR
from forethought.core.config import load_config
from forethought.models.gpt import GPT, GPTConfig
from forethought.myopia.synthetic import SyntheticConfig


def _model(init: str, seed: int = 0, d: int = 256) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(n_positions=64, n_embd=d, n_layer=2, n_head=2, input_dim=2, output_dim=1,
                         activation="relu", init=init))


def test_reference_init_is_gpt2_body_with_torch_default_input_and_head():
    ref, gpt2 = _model("reference"), _model("gpt2")
    d = ref.config.n_embd
    # the body (blocks, positions, final LayerNorm) is GPT-2's, draw for draw
    for (name, a), (_, b) in zip(ref.named_parameters(), gpt2.named_parameters(), strict=True):
        if not name.startswith(("wte.", "head.")):
            assert torch.equal(a, b), name
    assert isinstance(ref.ln_f, torch.nn.LayerNorm)
    assert abs(ref.h[0].attn.c_attn.weight.std().item() - 0.02) < 0.001
    assert abs(ref.h[0].mlp.c_fc.weight.std().item() - 0.02) < 0.001
    assert abs(ref.h[0].mlp.c_proj.weight.std().item() - 0.02 / math.sqrt(4)) < 0.001
    assert ref.h[0].attn.c_attn.bias.abs().max() == 0
    # input Linear(2, d) and head Linear(d, 1): PyTorch's Kaiming-uniform, U(±1/sqrt(fan_in)), std 1/sqrt(3·fan_in)
    for lin, fan_in in ((ref.wte, 2), (ref.head, d)):
        bound = 1 / math.sqrt(fan_in)
        assert lin.weight.abs().max() <= bound and lin.bias.abs().max() <= bound
        assert lin.bias.abs().max() > 0  # not GPT-2's zero bias
    assert abs(ref.wte.weight.std().item() - 1 / math.sqrt(6)) < 0.03  # 0.408, vs GPT-2's 0.02
    assert abs(ref.head.weight.std().item() - 1 / math.sqrt(3 * d)) < 0.01  # 0.036 at d = 256
    assert abs(gpt2.wte.weight.std().item() - 0.02) < 0.005 and gpt2.wte.bias.abs().max() == 0


def test_reference_equals_gpt2_for_token_models():
    def lm(init: str) -> GPT:
        torch.manual_seed(0)
        return GPT(GPTConfig(vocab_size=50, n_positions=16, n_embd=16, n_layer=1, n_head=2, init=init))

    for a, b in zip(lm("reference").parameters(), lm("gpt2").parameters(), strict=True):
        assert torch.equal(a, b)


def test_synthetic_paper_preset_uses_the_reference_model():
    cfg = load_config(SyntheticConfig, CONFIG_DIR / "myopia" / "synthetic_paper.yaml")
    assert cfg.model.init == "reference" and cfg.model.final_norm is True


def test_bad_init_is_refused():
    from forethought.core.errors import ForethoughtError

    with pytest.raises(ForethoughtError, match="init"):
        load_config(SyntheticConfig, CONFIG_DIR / "myopia" / "synthetic_tiny.yaml", ["--model.init", "bogus"])
