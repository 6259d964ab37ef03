"""``make_myopic(model, mode=...)``: turn the attention of our GPT or of an HF causal LM myopic, in place.

Modes (following Wu et al. 2024, "Do language models plan for future tokens?", and its reference code):

* ``detach_hidden`` (default) — other positions' K/V are recomputed from detached hidden states, so the K/V
  projection weights still learn from the off-diagonal terms but no earlier position's state does.
* ``detach_kv`` — other positions' K/V are frozen entirely (no gradient at all).
* ``beta`` (with detach_hidden / detach_kv) — a dial: a fraction beta of the gradient flows as in vanilla.
* ``zero_past`` — other positions' K/V are zero: the "transformer bigram" baseline (forward changes).
* ``local`` — other positions' states come from a frozen vanilla model (``frozen=``), projected by this model's
  own K/V weights; the "local myopic" bonus (forward changes).
* ``vanilla`` — undo: plain attention again.

HF models are handled by wrapping each attention module's ``forward`` (the attention-function registry only
sees projected, rotated q/k/v, which is not enough for ``detach_hidden``). Supported: the Llama family (modules
with q_proj/k_proj/v_proj/o_proj and rotary ``position_embeddings``: Llama, SmolLM2, Mistral, Qwen2, ...) and
GPT-2. State-dict keys are unchanged, so checkpoints and PEFT adapters work as before. During cached generation
the forward pass is identical to vanilla, so the wrapper defers to the original code there.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from forethought.core.errors import ForethoughtError
from forethought.myopia.attention import blend, myopic_attention, reference_myopic_attention, weight_grad_only

Mode = Literal["vanilla", "detach_hidden", "detach_kv", "zero_past", "local"]
MODES: tuple[str, ...] = ("vanilla", "detach_hidden", "detach_kv", "zero_past", "local")
_ATTR = "_forethought_myopia"


@dataclass
class MyopiaSpec:
    mode: str = "detach_hidden"
    beta: float = 0.0
    implementation: Literal["fast", "reference"] = "fast"
    frozen_inputs: dict[int, torch.Tensor] = field(default_factory=dict)  # local mode: layer -> (B, T, C)


def _projection_past(x: torch.Tensor, value: torch.Tensor, proj: nn.Module, rows: slice | None = None,
                     conv1d: bool = False) -> torch.Tensor:
    """``proj(x)`` (already computed as ``value``) with gradients to the projection's weights only.
    Plain linear layers reuse ``value`` (no second matmul); anything else (LoRA, ...) is recomputed on x.detach()."""
    if isinstance(proj, nn.Linear) and not conv1d:
        w = proj.weight if rows is None else proj.weight[rows]
        b = None if proj.bias is None else (proj.bias if rows is None else proj.bias[rows])
        return weight_grad_only(value, x, w, b)
    if conv1d and type(proj).__name__ == "Conv1D":
        w = proj.weight if rows is None else proj.weight[:, rows]  # Conv1D weight is (in, out)
        b = proj.bias if rows is None else proj.bias[rows]
        return weight_grad_only(value, x, w.t(), b)
    out = proj(x.detach())
    return out if rows is None else out[..., rows]


def _attend(spec: MyopiaSpec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kp: torch.Tensor,
            vp: torch.Tensor, scale: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Pick the exact fast form when past K/V equal the live ones in value, else the explicit form."""
    if spec.mode in ("detach_hidden", "detach_kv"):
        kp, vp = blend(k, kp, spec.beta), blend(v, vp, spec.beta)
        if spec.implementation == "fast" and mask is None:
            return myopic_attention(q, k, v, kp, vp, scale)
    return reference_myopic_attention(q, k, v, kp, vp, scale, mask)


# ---------------------------------------------------------------- our GPT


def _gpt_override(spec: MyopiaSpec, layer: int) -> Callable:
    def override(attn: nn.Module, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape

        def flat(t: torch.Tensor) -> torch.Tensor:  # (B, H, T, hd) -> (B, T, C)
            return t.transpose(1, 2).reshape(B, T, C)

        if spec.mode == "detach_hidden":
            kp = attn.heads(_projection_past(x, flat(k), attn.c_attn, slice(C, 2 * C)))
            vp = attn.heads(_projection_past(x, flat(v), attn.c_attn, slice(2 * C, 3 * C)))
        elif spec.mode == "detach_kv":
            kp, vp = k.detach(), v.detach()
        elif spec.mode == "zero_past":
            kp, vp = torch.zeros_like(k), torch.zeros_like(v)
        else:  # local: the frozen vanilla model's layer input, through our own projections
            xf = spec.frozen_inputs[layer]
            _, kf, vf = F.linear(xf, attn.c_attn.weight, attn.c_attn.bias).split(C, dim=2)
            kp, vp = attn.heads(kf), attn.heads(vf)
        return _attend(spec, q, k, v, kp, vp, 1.0 / (q.shape[-1] ** 0.5))

    return override


# ---------------------------------------------------------------- HF Llama family


def _llama_forward(self: nn.Module, hidden_states: torch.Tensor, position_embeddings=None, attention_mask=None,
                   cache=None, **kwargs):
    cache = cache if cache is not None else kwargs.pop("past_key_values", None)
    spec: MyopiaSpec = getattr(self, _ATTR)
    if cache is not None and cache.get_seq_length(self.layer_idx) > 0:  # cached decoding: forward is vanilla
        return type(self).forward(self, hidden_states, position_embeddings, attention_mask, cache=cache, **kwargs)
    B, T, _ = hidden_states.shape
    shape = (B, T, -1, self.head_dim)
    rope = sys.modules[type(self).__module__].apply_rotary_pos_emb

    def heads(t: torch.Tensor, norm: str | None = None) -> torch.Tensor:  # (B, T, n*hd) -> (B, n, T, hd)
        t = t.view(shape)
        if norm is not None and hasattr(self, norm):  # Qwen3-style per-head q/k norms
            t = getattr(self, norm)(t)
        return t.transpose(1, 2)

    q_lin = self.q_proj(hidden_states)
    k_lin, v_lin = self.k_proj(hidden_states), self.v_proj(hidden_states)
    if spec.mode == "detach_hidden":
        kp_lin = _projection_past(hidden_states, k_lin, self.k_proj)
        vp_lin = _projection_past(hidden_states, v_lin, self.v_proj)
    elif spec.mode == "local":
        xf = spec.frozen_inputs[self.layer_idx]
        kp_lin, vp_lin = self.k_proj(xf), self.v_proj(xf)
    else:
        kp_lin, vp_lin = k_lin.detach(), v_lin.detach()
    q, k, v = heads(q_lin, "q_norm"), heads(k_lin, "k_norm"), heads(v_lin)
    kp, vp = heads(kp_lin, "k_norm"), heads(vp_lin)
    cos, sin = position_embeddings
    q, k = rope(q, k, cos, sin)
    kp = rope(kp, kp, cos, sin)[0]
    if spec.mode == "zero_past":
        kp, vp = torch.zeros_like(k), torch.zeros_like(v)
    if cache is not None:
        cache.update(k, v, self.layer_idx)
    g = self.num_key_value_groups
    k, v, kp, vp = (t.repeat_interleave(g, dim=1) if g > 1 else t for t in (k, v, kp, vp))
    mask = None if attention_mask is None else attention_mask[:, :, :, :T]
    y = _attend(spec, q, k, v, kp, vp, self.scaling, mask)  # (B, H, T, hd)
    y = y.transpose(1, 2).reshape(B, T, -1)
    return self.o_proj(y), None


# ---------------------------------------------------------------- HF GPT-2


def _gpt2_forward(self: nn.Module, hidden_states: torch.Tensor, cache=None, attention_mask=None, **kwargs):
    cache = cache if cache is not None else kwargs.pop("past_key_values", None)
    spec: MyopiaSpec = getattr(self, _ATTR)
    if kwargs.get("encoder_hidden_states") is not None or (
            cache is not None and cache.get_seq_length(self.layer_idx) > 0):
        return type(self).forward(self, hidden_states, cache=cache, attention_mask=attention_mask, **kwargs)
    B, T, C = hidden_states.shape
    qkv = self.c_attn(hidden_states)
    q_lin, k_lin, v_lin = qkv.split(self.split_size, dim=2)

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(B, T, -1, self.head_dim).transpose(1, 2)

    if spec.mode == "detach_hidden":
        kp_lin = _projection_past(hidden_states, k_lin, self.c_attn, slice(C, 2 * C), conv1d=True)
        vp_lin = _projection_past(hidden_states, v_lin, self.c_attn, slice(2 * C, 3 * C), conv1d=True)
    elif spec.mode == "local":
        _, kp_lin, vp_lin = self.c_attn(spec.frozen_inputs[self.layer_idx]).split(self.split_size, dim=2)
    elif spec.mode == "zero_past":
        kp_lin, vp_lin = torch.zeros_like(k_lin), torch.zeros_like(v_lin)
    else:
        kp_lin, vp_lin = k_lin.detach(), v_lin.detach()
    q, k, v, kp, vp = (heads(t) for t in (q_lin, k_lin, v_lin, kp_lin, vp_lin))
    if cache is not None:
        cache.update(k, v, self.layer_idx)
    mask = None if attention_mask is None else attention_mask[:, :, :, :T]
    y = _attend(spec, q, k, v, kp, vp, self.scaling, mask)
    y = self.c_proj(y.transpose(1, 2).reshape(B, T, C))
    return self.resid_dropout(y), None


# ---------------------------------------------------------------- public API


def attention_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The attention modules make_myopic can wrap, in layer order: ("gpt" | "llama" | "gpt2", module)."""
    from forethought.models.gpt import Attention

    found = []
    for _, m in model.named_modules():
        if isinstance(m, Attention):
            found.append(("gpt", m))
        elif all(hasattr(m, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj", "layer_idx", "head_dim")):
            found.append(("llama", m))
        elif type(m).__name__ == "GPT2Attention":
            found.append(("gpt2", m))
    return found


def myopia_mode(model: nn.Module) -> str:
    """The mode ``make_myopic`` last applied to ``model``'s attention ("vanilla" when none)."""
    for _, m in attention_modules(model):
        spec = getattr(m, _ATTR, None)
        if spec is not None:
            return spec.mode
    return "vanilla"


def make_myopic(model: nn.Module, mode: str = "detach_hidden", beta: float = 0.0,
                frozen: nn.Module | None = None, implementation: str = "fast") -> nn.Module:
    """Make every attention layer of ``model`` myopic in place and return the model.

    ``mode``: detach_hidden | detach_kv | zero_past | local | vanilla (undo). ``beta`` in [0, 1] lets that
    fraction of the gradient flow as in vanilla. ``frozen``: the frozen vanilla model for ``local`` (same
    architecture). ``implementation``: ``fast`` (one fused attention, exact) or ``reference`` (explicit O(T²)).
    """
    if mode not in MODES:
        raise ForethoughtError(f"unknown myopia mode '{mode}'; choose one of {', '.join(MODES)}")
    if not 0.0 <= beta <= 1.0:
        raise ForethoughtError(f"myopia beta must be in [0, 1], got {beta}")
    if beta and mode not in ("detach_hidden", "detach_kv"):
        raise ForethoughtError("myopia beta applies to detach_hidden and detach_kv only")
    if implementation not in ("fast", "reference"):
        raise ForethoughtError(f"unknown myopia implementation '{implementation}' (fast | reference)")
    mods = attention_modules(model)
    if not mods:
        raise ForethoughtError(
            f"make_myopic: found no supported attention modules in {type(model).__name__} "
            "(supported: forethought GPT, HF Llama-family and GPT-2 models)")
    _remove_frozen_hook(model)
    if mode == "vanilla":
        for kind, m in mods:
            if kind == "gpt":
                m.override = None
            elif "forward" in m.__dict__:
                del m.forward
            m.__dict__.pop(_ATTR, None)
        return model
    if mode == "local" and frozen is None:
        raise ForethoughtError("myopia mode 'local' needs a frozen vanilla model (frozen=...)")
    spec = MyopiaSpec(mode=mode, beta=beta, implementation=implementation)
    for i, (kind, m) in enumerate(mods):
        setattr(m, _ATTR, spec)
        if kind == "gpt":
            m.override = _gpt_override(spec, i)
        elif kind == "llama":
            m.forward = types.MethodType(_llama_forward, m)
        else:
            m.forward = types.MethodType(_gpt2_forward, m)
    if mode == "local":
        _install_frozen_hook(model, frozen, spec)
    return model


def _install_frozen_hook(model: nn.Module, frozen: nn.Module, spec: MyopiaSpec) -> None:
    """Before each forward of ``model``, run ``frozen`` on the same inputs and record every attention layer's
    input (by layer index), which the local-myopic layers use as the other positions' states."""
    frozen.eval().requires_grad_(False)
    fmods = attention_modules(frozen)
    if len(fmods) != len(attention_modules(model)):
        raise ForethoughtError("local myopia: the frozen model must have the same architecture as the model")
    for i, (_, m) in enumerate(fmods):
        def capture(mod, args, kwargs, i=i):
            spec.frozen_inputs[i] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        m.register_forward_pre_hook(capture, with_kwargs=True)

    def run_frozen(mod, args, kwargs):
        with torch.no_grad():
            if args:
                frozen(args[0])
            else:
                frozen(input_ids=kwargs["input_ids"], attention_mask=kwargs.get("attention_mask"))

    model._forethought_frozen_hook = model.register_forward_pre_hook(run_frozen, with_kwargs=True)
    # object.__setattr__: keep the frozen model out of state_dict() and parameters()
    object.__setattr__(model, "_forethought_frozen", frozen)


def _remove_frozen_hook(model: nn.Module) -> None:
    h = model.__dict__.pop("_forethought_frozen_hook", None)
    if h is not None:
        h.remove()
    model.__dict__.pop("_forethought_frozen", None)
