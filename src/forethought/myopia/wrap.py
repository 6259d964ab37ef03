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
sees projected, rotated q/k/v, which is not enough for ``detach_hidden``). One table, :data:`FAMILIES`, maps
attention classes to what differs between them (fused or separate projections, rotary or not and how much of
each head, q/k norms, query pre-scaling, output projection, attention dropout, sliding window, soft-capping):
Llama (SmolLM2), Mistral, Qwen2, Qwen3, Gemma, Gemma 2, GPT-2, GPT-NeoX (Pythia), Phi and OPT. Any other
attention class is refused in one line, never treated as a look-alike. Sliding windows and soft-capping are
applied (explicit form); attention dropout is drawn as HF's eager attention draws it. State-dict keys are
unchanged, so checkpoints and PEFT adapters work as before. During cached generation the forward pass is
identical to vanilla, so the wrapper defers to the original code there.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from forethought.core.errors import ForethoughtError
from forethought.myopia.attention import (
    blend,
    myopic_attention,
    reference_myopic_attention,
    weight_grad_only,
    window_mask,
)
from forethought.myopia.config import MODES, Mode  # their home imports no torch; importable from here too

_ATTR = "_forethought_myopia"


@dataclass
class MyopiaSpec:
    mode: Mode = "detach_hidden"
    beta: float = 0.0
    implementation: Literal["fast", "reference"] = "fast"
    horizon: int = 0  # query t reads live K/V of positions t − horizon .. t (0 = myopic)
    frozen_inputs: dict[int, torch.Tensor] = field(default_factory=dict)  # local mode: layer -> (B, T, C)


def _projection_past(x: torch.Tensor, value: torch.Tensor, proj: nn.Module, conv1d: bool = False,
                     rows: slice | None = None) -> torch.Tensor:
    """``proj(x)`` (already computed as ``value``; only its output ``rows`` if given) with gradients to the
    projection's weights only. Plain linear layers reuse ``value`` (no second matmul); anything else (LoRA, ...)
    is recomputed on x.detach()."""
    if isinstance(proj, nn.Linear) and not conv1d:
        w, b = proj.weight, proj.bias
        if rows is not None:
            w, b = w[rows], (None if b is None else b[rows])
        return weight_grad_only(value, x, w, b)
    if conv1d and type(proj).__name__ == "Conv1D":
        return weight_grad_only(value, x, proj.weight.t(), proj.bias)  # Conv1D weight is (in, out)
    out = proj(x.detach())
    return out if rows is None else out[..., rows]


def _attend(spec: MyopiaSpec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kp: torch.Tensor,
            vp: torch.Tensor, scale: float, mask: torch.Tensor | None = None, softcap: float | None = None,
            dropout_p: float = 0.0) -> torch.Tensor:
    """Pick the exact fused form when past K/V equal the live ones in value and nothing else changes the scores
    or probabilities (a mask, soft-capping, dropout); else the explicit form."""
    if spec.mode in ("detach_hidden", "detach_kv"):
        kp, vp = blend(k, kp, spec.beta), blend(v, vp, spec.beta)
        if spec.implementation == "fast" and mask is None and softcap is None and dropout_p == 0.0:
            return myopic_attention(q, k, v, kp, vp, scale, horizon=spec.horizon)
    return reference_myopic_attention(q, k, v, kp, vp, scale, mask, horizon=spec.horizon, softcap=softcap,
                                      dropout_p=dropout_p)


# ---------------------------------------------------------------- our GPT


def _gpt_override(spec: MyopiaSpec, layer: int) -> Callable:
    def override(attn: nn.Module, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape

        def flat(t: torch.Tensor) -> torch.Tensor:  # (B, H, T, hd) -> (B, T, C)
            return t.transpose(1, 2).reshape(B, T, C)

        if spec.mode == "detach_hidden":
            kp = attn.heads(_projection_past(x, flat(k), attn.c_attn, rows=slice(C, 2 * C)))
            vp = attn.heads(_projection_past(x, flat(v), attn.c_attn, rows=slice(2 * C, 3 * C)))
        elif spec.mode == "detach_kv":
            kp, vp = k.detach(), v.detach()
        elif spec.mode == "zero_past":
            kp, vp = torch.zeros_like(k), torch.zeros_like(v)
        else:  # local: the frozen vanilla model's layer input, through our own projections
            xf = spec.frozen_inputs[layer]
            _, kf, vf = F.linear(xf, attn.c_attn.weight, attn.c_attn.bias).split(C, dim=2)
            kp, vp = attn.heads(kf), attn.heads(vf)
        p = attn.attn_dropout if attn.training else 0.0
        return _attend(spec, q, k, v, kp, vp, 1.0 / (q.shape[-1] ** 0.5), dropout_p=p)

    return override


# ---------------------------------------------------------------- HF attention classes


def _none(m: nn.Module) -> None:
    return None


@dataclass(frozen=True)
class HFFamily:
    """What differs between HF attention classes, for one myopic forward that serves them all."""

    name: str
    qkv: str | tuple[str, str, str]  # one fused projection, or separate q / k / v projections
    out: Callable[[nn.Module, torch.Tensor], torch.Tensor]  # (B, T, H·hd) -> the module's output
    split: Callable[[nn.Module, torch.Tensor], tuple[torch.Tensor, ...]] | None = None  # fused -> q, k, v (B, T, ·)
    conv1d: bool = False  # GPT-2's Conv1D projections
    rope: bool = True  # rotary (possibly partial) through the modeling file's apply_rotary_pos_emb
    prescaled_query: bool = False  # OPT: q·scaling, then attention with scale 1
    head_dim: Callable[[nn.Module], int] = lambda m: m.head_dim
    norms: Callable[[nn.Module], tuple[nn.Module, nn.Module] | None] = _none  # per-head q / k norms
    dropout: Callable[[nn.Module], float] = lambda m: m.attention_dropout  # on the attention probabilities
    window: Callable[[nn.Module], int | None] = _none  # sliding-window attention (HF: t − s < window)
    softcap: Callable[[nn.Module], float | None] = _none  # attention-logit soft-capping


def _neox_split(m: nn.Module, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """GPT-NeoX's fused projection is laid out per head: (B, T, H·3·hd) -> q, k, v each (B, T, H·hd)."""
    B, T, _ = t.shape
    return tuple(c.reshape(B, T, -1) for c in t.view(B, T, -1, 3 * m.head_size).chunk(3, dim=-1))


_LLAMA = dict(qkv=("q_proj", "k_proj", "v_proj"), out=lambda m, y: m.o_proj(y))
_QK_NORM = dict(norms=lambda m: (m.q_norm, m.k_norm))
_WINDOW = dict(window=lambda m: m.sliding_window)

# The one dispatch table: attention class (module path + class name, matched along the class's MRO, so nothing is
# imported and subclasses are covered) -> its family. A class that is not here is refused, never guessed.
FAMILIES: dict[str, HFFamily] = {
    "transformers.models.llama.modeling_llama.LlamaAttention": HFFamily("llama", **_LLAMA),
    "transformers.models.mistral.modeling_mistral.MistralAttention": HFFamily(
        "mistral", **_LLAMA, window=lambda m: getattr(m.config, "sliding_window", None)),
    "transformers.models.qwen2.modeling_qwen2.Qwen2Attention": HFFamily("qwen2", **_LLAMA, **_WINDOW),
    "transformers.models.qwen3.modeling_qwen3.Qwen3Attention": HFFamily("qwen3", **_LLAMA, **_QK_NORM, **_WINDOW),
    "transformers.models.gemma.modeling_gemma.GemmaAttention": HFFamily("gemma", **_LLAMA),
    "transformers.models.gemma2.modeling_gemma2.Gemma2Attention": HFFamily(
        "gemma2", **_LLAMA, **_WINDOW, softcap=lambda m: m.attn_logit_softcapping),
    "transformers.models.gpt2.modeling_gpt2.GPT2Attention": HFFamily(
        "gpt2", qkv="c_attn", split=lambda m, t: t.split(m.split_size, dim=2), conv1d=True, rope=False,
        out=lambda m, y: m.resid_dropout(m.c_proj(y)), dropout=lambda m: m.attn_dropout.p),
    "transformers.models.gpt_neox.modeling_gpt_neox.GPTNeoXAttention": HFFamily(
        "gpt_neox", qkv="query_key_value", split=_neox_split, out=lambda m, y: m.dense(y),
        head_dim=lambda m: m.head_size),
    "transformers.models.phi.modeling_phi.PhiAttention": HFFamily(
        "phi", qkv=("q_proj", "k_proj", "v_proj"), out=lambda m, y: m.dense(y),
        norms=lambda m: (m.q_layernorm, m.k_layernorm) if m.qk_layernorm else None),
    "transformers.models.opt.modeling_opt.OPTAttention": HFFamily(
        "opt", qkv=("q_proj", "k_proj", "v_proj"), out=lambda m, y: m.out_proj(y), rope=False,
        prescaled_query=True, dropout=lambda m: m.dropout),
}


def hf_family(m: nn.Module) -> HFFamily | None:
    """The family of an HF attention module, by its class (or a base class) in :data:`FAMILIES`."""
    for cls in type(m).__mro__:
        fam = FAMILIES.get(f"{cls.__module__}.{cls.__qualname__}")
        if fam is not None:
            return fam
    return None


def _rotary(rope: Callable, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
            sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE on the first cos.shape[-1] dims of each head (all of them, or the partial rotary of GPT-NeoX / Phi)."""
    rd = cos.shape[-1]
    if rd == q.shape[-1]:
        return rope(q, k, cos, sin)
    qr, kr = rope(q[..., :rd], k[..., :rd], cos, sin)
    return torch.cat([qr, q[..., rd:]], dim=-1), torch.cat([kr, k[..., rd:]], dim=-1)


def _hf_forward(fam: HFFamily, sig: inspect.Signature, layer: int) -> Callable:
    """The myopic forward of one HF attention module (bound to it with types.MethodType)."""

    def forward(self: nn.Module, *args, **kwargs):
        spec: MyopiaSpec = getattr(self, _ATTR)
        a = sig.bind(self, *args, **kwargs).arguments
        extra = a.get("kwargs", {})
        cache = next((c for c in (a.get("cache"), a.get("layer_past"), a.get("past_key_values"),
                                  extra.get("past_key_values")) if c is not None), None)
        if a.get("encoder_hidden_states") is not None or (
                cache is not None and cache.get_seq_length(self.layer_idx) > 0):
            return type(self).forward(self, *args, **kwargs)  # cross-attention, cached decoding: vanilla forward
        x = a["hidden_states"]
        B, T, _ = x.shape
        hd = fam.head_dim(self)
        if isinstance(fam.qkv, str):  # fused projection
            proj = getattr(self, fam.qkv)
            lin = proj(x)
            q_lin, k_lin, v_lin = fam.split(self, lin)
            if spec.mode == "detach_hidden":
                _, kp_lin, vp_lin = fam.split(self, _projection_past(x, lin, proj, fam.conv1d))
            elif spec.mode == "local":
                _, kp_lin, vp_lin = fam.split(self, proj(spec.frozen_inputs[layer]))
            else:
                kp_lin, vp_lin = k_lin, v_lin  # replaced below
        else:
            qp, kp_, vp_ = (getattr(self, n) for n in fam.qkv)
            q_lin, k_lin, v_lin = qp(x), kp_(x), vp_(x)
            if spec.mode == "detach_hidden":
                kp_lin, vp_lin = _projection_past(x, k_lin, kp_), _projection_past(x, v_lin, vp_)
            elif spec.mode == "local":
                xf = spec.frozen_inputs[layer]
                kp_lin, vp_lin = kp_(xf), vp_(xf)
            else:
                kp_lin, vp_lin = k_lin, v_lin  # replaced below
        scale = self.scaling
        if fam.prescaled_query:
            q_lin, scale = q_lin * self.scaling, 1.0
        norms = fam.norms(self)

        def heads(t: torch.Tensor, norm: nn.Module | None = None) -> torch.Tensor:  # (B, T, n·hd) -> (B, n, T, hd)
            t = t.reshape(B, T, -1, hd).transpose(1, 2)
            return t if norm is None else norm(t)

        q, k, v = heads(q_lin, norms and norms[0]), heads(k_lin, norms and norms[1]), heads(v_lin)
        kp, vp = heads(kp_lin, norms and norms[1]), heads(vp_lin)
        if fam.rope:
            cos, sin = a["position_embeddings"]
            rope = sys.modules[type(self).__module__].apply_rotary_pos_emb
            q, k = _rotary(rope, q, k, cos, sin)
            kp = _rotary(rope, kp, kp, cos, sin)[0]
        if spec.mode == "detach_kv":
            kp, vp = k.detach(), v.detach()
        elif spec.mode == "zero_past":
            kp, vp = torch.zeros_like(k), torch.zeros_like(v)
        if cache is not None:
            cache.update(k, v, self.layer_idx)
        g = getattr(self, "num_key_value_groups", 1)
        k, v, kp, vp = (t.repeat_interleave(g, dim=1) if g > 1 else t for t in (k, v, kp, vp))
        mask = a.get("attention_mask")
        mask = None if mask is None else mask[:, :, :, :T]
        window = fam.window(self)
        if window is not None and window < T:  # whatever mask HF passed (or none), the window holds
            w = window_mask(T, window, x.device)
            mask = w if mask is None else (mask & w if mask.dtype == torch.bool else
                                           mask.masked_fill(~w, torch.finfo(mask.dtype).min))
        p = fam.dropout(self) if self.training else 0.0
        y = _attend(spec, q, k, v, kp, vp, scale, mask, fam.softcap(self), p)  # (B, H, T, hd)
        return fam.out(self, y.transpose(1, 2).reshape(B, T, -1)), None

    return forward


# ---------------------------------------------------------------- public API


def attention_modules(model: nn.Module) -> list[tuple[HFFamily | str, nn.Module]]:
    """The attention modules make_myopic can wrap, in layer order: ("gpt" | an :class:`HFFamily`, module).
    Raises ForethoughtError for an attention class with no myopic form here, or for an HF attention
    implementation other than eager / sdpa (its kernels get no masks or arguments this code could honour)."""
    from forethought.models.gpt import Attention

    found: list[tuple[HFFamily | str, nn.Module]] = []
    for name, m in model.named_modules():
        if isinstance(m, Attention):
            found.append(("gpt", m))
            continue
        fam = hf_family(m)
        if fam is not None:
            impl = getattr(getattr(m, "config", None), "_attn_implementation", None) or "eager"
            if impl not in ("eager", "sdpa"):
                raise ForethoughtError(f"make_myopic: attention implementation '{impl}' is not supported "
                                       "(load the model with attn_implementation='sdpa' or 'eager')")
            found.append((fam, m))
        elif type(m).__name__.endswith("Attention"):  # an attention class with no entry: refuse, never guess
            raise ForethoughtError(
                f"make_myopic: no myopic form for {type(m).__name__} ({name}); supported: forethought GPT, "
                + ", ".join(f.name for f in FAMILIES.values()))
    return found


def myopia_mode(model: nn.Module) -> str:
    """The mode ``make_myopic`` last applied to ``model``'s attention ("vanilla" when none)."""
    for _, m in attention_modules(model):
        spec = getattr(m, _ATTR, None)
        if spec is not None:
            return spec.mode
    return "vanilla"


def make_myopic(model: nn.Module, mode: str = "detach_hidden", beta: float = 0.0,
                frozen: nn.Module | None = None, implementation: str = "fast", horizon: int = 0,
                local_form: str = "ours") -> nn.Module:
    """Make every attention layer of ``model`` myopic in place and return the model.

    ``mode``: detach_hidden | detach_kv | zero_past | local | vanilla (undo). ``beta`` in [0, 1] lets that
    fraction of the gradient flow as in vanilla. ``frozen``: the frozen vanilla model for ``local`` (same
    architecture). ``implementation``: ``fast`` (one fused attention, exact) or ``reference`` (explicit O(T²)).
    ``local_form`` (``local`` only): ``ours`` reads the frozen model's attention inputs (after its LayerNorm), the
    frozen model in eval mode; ``reference`` is the reference code's form, our GPT only: the frozen model's block
    inputs (the residual before the LayerNorm), projected by this model's K/V weights with no LayerNorm, the frozen
    model in the live model's train / eval mode (its dropout on while training).

    ``horizon`` k >= 0 (the myopia horizon, a dial between myopic, k = 0, and vanilla, k >= T − 1), defined per
    layer: in every attention layer, query t reads the live keys/values of positions t − k .. t and the "past"
    keys/values (as ``mode`` makes them) of positions before t − k. So in each layer the gradient of whatever
    position t computes reaches the layer inputs of positions t − k .. t only; through L layers the gradient of
    position t's loss can reach back L·k positions (position t − k's state in layer l is shaped by its own band
    in layer l − 1), never further. Cost: k = 0 one fused attention plus O(T·D); k >= 1 one fused attention over
    2T keys (about twice one attention, whatever k).
    """
    if mode not in MODES:
        raise ForethoughtError(f"unknown myopia mode '{mode}'; choose one of {', '.join(MODES)}")
    if not 0.0 <= beta <= 1.0:
        raise ForethoughtError(f"myopia beta must be in [0, 1], got {beta}")
    if beta and mode not in ("detach_hidden", "detach_kv"):
        raise ForethoughtError("myopia beta applies to detach_hidden and detach_kv only")
    if implementation not in ("fast", "reference"):
        raise ForethoughtError(f"unknown myopia implementation '{implementation}' (fast | reference)")
    if horizon < 0:
        raise ForethoughtError(f"myopia horizon must be >= 0, got {horizon}")
    mods = attention_modules(model)
    if not mods:
        raise ForethoughtError(
            f"make_myopic: found no supported attention modules in {type(model).__name__} "
            "(supported: forethought GPT, " + ", ".join(f.name for f in FAMILIES.values()) + ")")
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
    if local_form not in ("ours", "reference"):
        raise ForethoughtError(f"unknown local_form '{local_form}' (ours | reference)")
    if mode == "local" and local_form == "reference" and any(kind != "gpt" for kind, _ in mods):
        raise ForethoughtError("local_form 'reference' is implemented for our GPT only")
    spec = MyopiaSpec(mode=mode, beta=beta, implementation=implementation, horizon=horizon)
    for i, (kind, m) in enumerate(mods):
        setattr(m, _ATTR, spec)
        if kind == "gpt":
            m.override = _gpt_override(spec, i)
        else:
            m.forward = types.MethodType(_hf_forward(kind, inspect.signature(type(m).forward), i), m)
    if mode == "local":
        _install_frozen_hook(model, frozen, spec, local_form)
    return model


def _install_frozen_hook(model: nn.Module, frozen: nn.Module, spec: MyopiaSpec, local_form: str = "ours") -> None:
    """Before each forward of ``model``, run ``frozen`` on the same inputs and record, by layer index, what the
    local-myopic layers use as the other positions' states: every attention layer's input (``ours``), or every
    block's input, the residual before the LayerNorm (``reference``: our GPT's blocks ``h``)."""
    frozen.eval().requires_grad_(False)
    fmods = attention_modules(frozen)
    if len(fmods) != len(attention_modules(model)):
        raise ForethoughtError("local myopia: the frozen model must have the same architecture as the model")
    if local_form == "reference":
        if any(kind != "gpt" for kind, _ in fmods):
            raise ForethoughtError("local_form 'reference' is implemented for our GPT only")
        fmods = [("gpt", block) for block in frozen.h]
    for i, (_, m) in enumerate(fmods):
        def capture(mod, args, kwargs, i=i):
            spec.frozen_inputs[i] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        m.register_forward_pre_hook(capture, with_kwargs=True)

    def run_frozen(mod, args, kwargs):
        if local_form == "reference":  # the reference's frozen model sits in the trained module: its mode follows
            frozen.train(model.training)
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


def detach_before(model: nn.Module, t: int) -> list[torch.utils.hooks.RemovableHandle]:
    """The slow per-position oracle: hooks making every attention layer read positions < t as constants, so a
    backward of position t's loss alone is what myopic training gives that position. Remove the handles after."""
    def hook(mod: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        x = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]  # (B, T, C)
        x = torch.cat([x[:, :t].detach(), x[:, t:]], dim=1)
        if "hidden_states" in kwargs:
            kwargs["hidden_states"] = x
            return args, kwargs
        return (x, *args[1:]), kwargs

    return [m.register_forward_pre_hook(hook, with_kwargs=True) for _, m in attention_modules(model)]


def per_position_gradient(model: nn.Module, losses: Callable[[], torch.Tensor], params: list[nn.Parameter],
                          positions: int, horizon: int = 0) -> list[torch.Tensor]:
    """The slow form of myopic training's gradient, for checking the one-pass form: Σ_t ∂ℓ_t/∂θ with one forward
    and backward per position t, every attention layer reading positions < t − horizon as constants
    (:func:`detach_before`). ``losses()`` runs ``model`` and returns its per-position losses (positions,);
    parameters no loss reaches get zeros. Returns one gradient per parameter of ``params``."""
    total = [torch.zeros_like(p) for p in params]
    for t in range(positions):
        handles = detach_before(model, max(t - horizon, 0))
        try:
            loss_t = losses()[t]
        finally:
            for h in handles:
                h.remove()
        for acc, g in zip(total, torch.autograd.grad(loss_t, params, allow_unused=True), strict=True):
            if g is not None:
                acc += g
    return total
