"""The trainable pieces of the three methods: an HF causal LM with a PEFT adapter (or fully fine-tuned), and a
small head — the Predictor's pooled head or PredGen's task adapter — saved and reloaded together.

Saved model folder (``<run>/model/``): ``adapter/`` (peft ``save_pretrained``: ``adapter_model.safetensors`` +
``adapter_config.json``) or ``lm/`` (full fine-tuning: the whole model), ``head.safetensors`` when there is a
head, ``tokenizer/`` (the tokenizer it was trained with; a full fine-tune keeps it in ``lm/``) and
``predgen.json`` (format version, method, base model, task, prompt and head settings) from which it is rebuilt.
``predgen.json`` also records the base model the name resolved to when it trained (``base_model``: folder, source,
weights' SHA-256); loading an adapter checks that the name resolves to the same weights now, so an adapter never
loads silently onto other weights (e.g. another copy of SmolLM2).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import SafetensorError

from forethought.core.checkpoint import FORMAT_VERSION, check_format_version
from forethought.core.env import record_model, resolve_model_path
from forethought.core.errors import ForethoughtError, first_line
from forethought.core.io import atomic_write_json, read_json_object
from forethought.predgen.config import PEFT_METHODS, AdapterConfig  # their home imports no torch
from forethought.predgen.registry import CHOICE_ALPHA0, Method, PredGen, Predictor, method_named, trained_method_names

# predgen.json's keys and their types (a dict is a section)
META_KEYS: dict[str, type] = {"method": str, "base": str, "task_spec": dict, "prompt": dict, "layer": int,
                              "n_out": int, "head": dict, "adapter": dict}
T = TypeVar("T")
# What missing or corrupt files raise while peft / transformers / safetensors read them (a missing folder or
# config: OSError or ValueError; bad JSON: ValueError; a torn tensor file: SafetensorError). Anything else is
# a bug and keeps its traceback.
FILE_ERRORS = (OSError, ValueError, SafetensorError)
ROCOFT_FILE = "rocoft.safetensors"  # a RoCoFT adapter: its deltas, under adapter/


def apply_adapter(lm: nn.Module, cfg: AdapterConfig, total_steps: int) -> nn.Module:
    """Wrap ``lm`` with peft (LoRA / AdaLoRA / DoRA) or RoCoFT, or leave every weight trainable for ``full``."""
    if cfg.method not in PEFT_METHODS:
        raise ForethoughtError(f"unknown adapter method '{cfg.method}'; choose one of {', '.join(PEFT_METHODS)}")
    if cfg.method == "rocoft":
        from forethought.models.rocoft import apply_rocoft

        return apply_rocoft(lm, cfg.rocoft_side, cfg.r, str(cfg.target_modules))
    if cfg.method == "full":
        for p in lm.parameters():
            p.requires_grad_(True)
        return lm
    from peft import AdaLoraConfig, LoraConfig, get_peft_model

    targets: str | list[str] = cfg.target_modules
    if targets != "all-linear":
        targets = [t.strip() for t in str(targets).split(",") if t.strip()]
    common = dict(lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=targets, task_type="CAUSAL_LM")
    if cfg.method == "adalora":
        # AdaLoRA prunes from init_r to target_r between tinit and total_step - tfinal (peft's schedule).
        steps = max(total_steps, 10)
        pc = AdaLoraConfig(init_r=max(cfg.r * 3 // 2, 1), target_r=cfg.r, total_step=steps, tinit=steps // 10,
                           tfinal=steps // 5, deltaT=max(steps // 20, 1), **common)
    else:
        pc = LoraConfig(r=cfg.r, use_dora=cfg.method == "dora", **common)
    return get_peft_model(lm, pc)


class PoolingHead(nn.Module):
    """Predictor head: pool the prompt's hidden states (last real token, or the mean) -> linear layer, as HF's
    ``*ForSequenceClassification`` (last non-pad token) does."""

    def __init__(self, d: int, n_out: int, pooling: Literal["last", "mean"] = "last"):
        super().__init__()
        if pooling not in ("last", "mean"):
            raise ForethoughtError(f"predictor pooling must be 'last' or 'mean', got '{pooling}'")
        self.pooling = pooling
        self.out = nn.Linear(d, n_out)

    def pool(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """states (B, P, d), mask (B, P) with left padding -> (B, d)."""
        if self.pooling == "last":
            return states[:, -1]  # left padding: the last column is every row's last real token
        w = mask.to(states.dtype).unsqueeze(-1)
        return (states * w).sum(1) / w.sum(1).clamp_min(1.0)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.out(self.pool(states, mask).float())  # (B, n_out)


@dataclass
class ChoiceStates:
    """Each example's choices as the model reads them: the states that predict a choice's tokens (teacher-forced
    after the prompt: the same positions as Z when the model writes that choice)."""

    states: torch.Tensor  # (B, K, L, d)
    mask: torch.Tensor  # (B, K, L) bool, True on a choice's real positions
    classes: torch.Tensor  # (B, K) long: each choice's class index, -1 where a row has fewer than K choices
    loglik: torch.Tensor | None = None  # (B, K): each choice's summed token log-probability (when asked for)


@dataclass
class AdapterInput:
    """What PredGen's adapter may read about a generated answer: Z (the states that predicted its m tokens),
    the vocabulary logits at those positions (``reads == "logits"``), the example's choices (``"choices"``)."""

    states: torch.Tensor  # (B, m, d)
    mask: torch.Tensor  # (B, m) bool
    logits: torch.Tensor | None = None  # (B, m, V)
    choices: ChoiceStates | None = None


class _Pool(nn.Module):
    """LayerNorm, then attention pooling (a learned query) or the mean over the masked positions."""

    def __init__(self, d: int, pooling: Literal["attention", "mean"]):
        super().__init__()
        if pooling not in ("attention", "mean"):
            raise ForethoughtError(f"adapter pooling must be 'attention' or 'mean', got '{pooling}'")
        self.pooling = pooling
        self.norm = nn.LayerNorm(d)
        self.query = nn.Parameter(torch.zeros(d))  # zero query = uniform attention at the start

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(..., m, d), (..., m) bool -> (..., d)."""
        z = self.norm(states.float())
        if self.pooling == "attention":
            scores = (z @ self.query) / z.shape[-1] ** 0.5  # (..., m)
        else:
            scores = torch.zeros(z.shape[:-1], device=z.device)
        weights = torch.softmax(scores.masked_fill(~mask, -torch.inf), dim=-1)
        return (weights.unsqueeze(-1) * z).sum(-2)


class TaskAdapter(nn.Module):
    """PredGen's task adapter T(Z): the states that predicted the m answer tokens, (B, m, d) with a mask ->
    attention pooling (a learned query) or the mean -> MLP -> class logits or one number."""

    reads = "states"

    def __init__(self, d: int, n_out: int, pooling: Literal["attention", "mean"] = "attention", hidden: int = 256):
        super().__init__()
        self.pool = _Pool(d, pooling)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, n_out))

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.pool(states, mask))  # (B, n_out)

    def read(self, inp: AdapterInput) -> torch.Tensor:
        return self(inp.states, inp.mask)


class LogitAdapter(nn.Module):
    """The reference code's classification adapter: two bias-free linear layers over the vocabulary logits of
    the answer positions (V -> hidden, averaged over the positions, -> classes)."""

    reads = "logits"

    def __init__(self, vocab: int, n_out: int, hidden: int = 256):
        super().__init__()
        self.dense = nn.Linear(vocab, hidden, bias=False)
        self.score = nn.Linear(hidden, n_out, bias=False)

    def read(self, inp: AdapterInput) -> torch.Tensor:
        if inp.logits is None:
            raise ValueError("the logit-reading adapter needs the answer positions' logits")
        h = self.dense(inp.logits.float())  # (B, m, hidden)
        w = inp.mask.to(h.dtype).unsqueeze(-1)
        return self.score((h * w).sum(1) / w.sum(1).clamp_min(1.0))  # (B, n_out)


class ChoiceAdapter(nn.Module):
    """PredGen's T(Z) on multiple choice answered with the choice's text: a score per choice from the generated
    answer's pooled states z and that choice's own pooled states c_k (one pooling for both):
    s_k = α·cos(z, c_k) + MLP([z, c_k, z·c_k, |z − c_k|]). With ``beta0`` > 0 it is the likelihood variant, not
    T(Z): it also adds β·ℓ_k, ℓ_k the choice's summed token log-probability under the model (read from the same
    pass as c_k), which is exactly the rank decoder's score, so it reads what the rank decoder reads (measured on
    ARC-Easy: it agrees with the rank decoder on about 95 % of the items). When the model wrote choice k,
    its states are c_k's (same model, same tokens, same positions), so cos(z, c_k) = 1: with α starting at
    ``alpha0`` (default 5) the adapter starts as the decoded answer, and the MLP learns when to overrule it (with the
    MLP alone it stayed at chance for 20 ARC-Easy steps, l_d ≈ ln 4). Each score depends on its own choice only, so
    permuting an example's choices permutes the scores; classes that are not among the example's choices get
    -inf (zero probability after the softmax). Output (B, n_classes)."""

    reads = "choices"
    ALPHA0 = CHOICE_ALPHA0

    def __init__(self, d: int, n_out: int, pooling: Literal["attention", "mean"] = "attention", hidden: int = 256,
                 alpha0: float = ALPHA0, beta0: float = 0.0):
        super().__init__()
        self.n_out = n_out
        self.pool = _Pool(d, pooling)
        self.alpha = nn.Parameter(torch.tensor(float(alpha0)))
        self.beta = nn.Parameter(torch.tensor(float(beta0))) if beta0 > 0 else None  # None: ℓ_k not read
        self.mlp = nn.Sequential(nn.Linear(4 * d, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def read(self, inp: AdapterInput) -> torch.Tensor:
        ch = inp.choices
        if ch is None:
            raise ValueError("the choice-scoring adapter needs the example's choices")
        z = self.pool(inp.states, inp.mask)  # (B, d)
        c = self.pool(ch.states, ch.mask | ~ch.mask.any(-1, keepdim=True))  # (B, K, d); empty slots: any value
        zk = z.unsqueeze(1).expand_as(c)
        s = self.alpha * F.cosine_similarity(zk, c, dim=-1) + \
            self.mlp(torch.cat([zk, c, zk * c, (zk - c).abs()], dim=-1))[..., 0]  # (B, K)
        if self.beta is not None:
            if ch.loglik is None:
                raise ValueError("this choice-scoring adapter reads the choices' log-likelihoods")
            s = s + self.beta * ch.loglik.to(s.dtype)
        out = s.new_full((s.shape[0], self.n_out + 1), -torch.inf)  # the extra column takes the empty slots
        slot = torch.where(ch.classes >= 0, ch.classes, self.n_out)
        return out.scatter(1, slot, s)[:, :self.n_out]


class PredGenModel(nn.Module):
    """The LM (with its adapter) and an optional head, as one module for the trainer and checkpoints."""

    def __init__(self, lm: nn.Module, head: nn.Module | None):
        super().__init__()
        self.lm = lm
        self.head = head

    def forward(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(self, ...)``: losses run through ``forward`` so a DDP wrapper sees the call and syncs gradients."""
        return fn(self, *args, **kwargs)


def _config_int(lm: nn.Module, keys: tuple[str, ...], what: str) -> int:
    cfg = lm.config
    for key in keys:
        if getattr(cfg, key, None):
            return int(getattr(cfg, key))
    raise ForethoughtError(f"cannot tell the {what} of {type(lm).__name__}")


def vocab_size(lm: nn.Module) -> int:
    return _config_int(lm, ("vocab_size",), "vocabulary size")


def _renamed_keys(state: dict[str, torch.Tensor], head: nn.Module) -> dict[str, torch.Tensor]:
    """A TaskAdapter saved before its pooling became a submodule kept ``norm.*`` and ``query`` at the top."""
    if isinstance(head, TaskAdapter) and "query" in state:
        return {(f"pool.{k}" if k == "query" or k.startswith("norm.") else k): v for k, v in state.items()}
    return state


def hidden_size(lm: nn.Module) -> int:
    return _config_int(lm, ("hidden_size", "n_embd", "d_model"), "hidden size")


def check_layer(layer: int, lm: nn.Module) -> int:
    """``layer`` if it indexes the LM's hidden states (the embeddings, then one per block: 0..n, or -(n+1)..-1
    from the end), else a one-line error; checked before anything runs or is written."""
    n = _config_int(lm, ("num_hidden_layers", "n_layer", "num_layers"), "number of layers")
    if isinstance(layer, bool) or not isinstance(layer, int) or not -(n + 1) <= layer <= n:
        raise ForethoughtError(f"layer {layer!r} is out of range: the model has {n} layers, so the hidden states "
                               f"are indexed {-(n + 1)}..{n} (0 = the embeddings, -1 = the last layer)")
    return layer


def build_head(method: Method | str, d: int, n_out: int, pooling: str, hidden: int, bias_init: float | None,
               reads: str = "states", vocab: int = 0, choice_alpha: float = CHOICE_ALPHA0,
               choice_loglik: float = 0.0) -> nn.Module | None:
    """The head of ``method`` (or the method of that name) over ``d``-wide states with ``n_out`` outputs, or None
    when it has none. Regression heads start at the mean training target (``bias_init``) so the first MSE steps
    are not spent on the offset; ``choice_alpha`` / ``choice_loglik`` are the choice-scoring adapter's starting
    α and β (a saved model's α does not matter: its weights replace it; β decides whether the head reads ℓ_k)."""
    return _method_head(method_named(method), d, n_out, pooling, hidden, bias_init, reads, vocab, choice_alpha,
                        choice_loglik)


# Each method's head is registered here for its registry class (dispatch on the method object; a subclass
# inherits its parent's), so the torch-free registry never imports this module.
@functools.singledispatch
def _method_head(method: Method, d: int, n_out: int, pooling: str, hidden: int, bias_init: float | None,
                 reads: str, vocab: int, choice_alpha: float, choice_loglik: float) -> nn.Module | None:
    return None  # no head: the method predicts the answer it decodes (Generator, base)


@_method_head.register(Predictor)
def _predictor_head(method: Predictor, d: int, n_out: int, pooling: str, hidden: int, bias_init: float | None,
                    reads: str, vocab: int, choice_alpha: float, choice_loglik: float) -> nn.Module:
    head = PoolingHead(d, n_out, pooling)
    fill_bias(head.out, bias_init)
    return head


@_method_head.register(PredGen)
def _predgen_head(method: PredGen, d: int, n_out: int, pooling: str, hidden: int, bias_init: float | None,
                  reads: str, vocab: int, choice_alpha: float, choice_loglik: float) -> nn.Module:
    """``reads``: states -> TaskAdapter, logits -> LogitAdapter over ``vocab`` logits, choices -> ChoiceAdapter
    (the last two score classes: no regression bias)."""
    if reads == "logits":
        return LogitAdapter(vocab, n_out, hidden)
    if reads == "choices":
        return ChoiceAdapter(d, n_out, pooling, hidden, alpha0=choice_alpha, beta0=choice_loglik)
    head = TaskAdapter(d, n_out, pooling, hidden)
    fill_bias(head.mlp[-1], bias_init)
    return head


def fill_bias(layer: nn.Linear, value: float | None) -> None:
    """A regression head's output ``layer`` starts at ``value`` (the mean training target), so the first MSE
    steps are not spent on the offset; None leaves it."""
    if value is not None:
        with torch.no_grad():
            layer.bias.fill_(value)


def save_model(model: PredGenModel, tokenizer: Any, folder: Path, meta: dict[str, Any], adapter: AdapterConfig) -> None:
    """Write the adapter (or the full LM), the head and the metadata; ``predgen.json`` is written last, so a
    folder without it is incomplete."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "predgen.json").unlink(missing_ok=True)
    if adapter.method == "full":
        model.lm.save_pretrained(folder / "lm")
        tokenizer.save_pretrained(folder / "lm")
    elif adapter.method == "rocoft":  # the deltas only; predgen.json's adapter section says how to wrap the base
        from forethought.data.tokenizers import save_run_tokenizer
        from forethought.models.rocoft import rocoft_state

        (folder / "adapter").mkdir(parents=True, exist_ok=True)
        save_file(rocoft_state(model.lm), str(folder / "adapter" / ROCOFT_FILE))
        save_run_tokenizer(tokenizer, folder)
    else:
        from forethought.data.tokenizers import save_run_tokenizer

        model.lm.save_pretrained(folder / "adapter")
        save_run_tokenizer(tokenizer, folder)
    if model.head is not None:
        save_file({k: v.detach().contiguous().cpu() for k, v in model.head.state_dict().items()},
                  str(folder / "head.safetensors"))
    base = record_model(meta["base"], resolve_model_path(meta["base"]))  # memoised: the load noted it already
    atomic_write_json(folder / "predgen.json", {"format_version": FORMAT_VERSION, **meta, "adapter": asdict(adapter),
                                                "base_model": base})


def from_record(cls: type[T], data: Any, where: str) -> T:
    """The dataclass ``cls`` from a saved dict: a key it does not know, or a missing key without a default,
    is a one-line error naming ``where`` (a corrupt or hand-edited file), not a TypeError."""
    if not isinstance(data, dict):
        raise ForethoughtError(f"{where} must be an object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    missing = [n for n, f in fields.items() if n not in data and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    unknown = [k for k in data if k not in fields]
    if missing or unknown:
        problems = ([f"missing key(s) {', '.join(missing)}"] if missing else []) + \
                   ([f"unknown key(s) {', '.join(map(str, unknown))}"] if unknown else [])
        raise ForethoughtError(f"{where}: {'; '.join(problems)}")
    return cls(**data)


def read_meta(folder: Path) -> dict[str, Any]:
    """``predgen.json`` of a saved model, checked: every key :func:`load_model` reads is there, with its type."""
    path = Path(folder) / "predgen.json"
    if not path.is_file():
        where = Path(folder)
        hint = " (pass the run folder or its model/ folder)" if not (where / "model").is_dir() else ""
        raise ForethoughtError(f"no saved PredGen model at {where}: predgen.json is missing{hint}")
    meta = read_json_object(path, tuple(META_KEYS))
    check_format_version(meta.get("format_version"), str(path), "train it again with this version")
    wrong = [f"{k} ({t.__name__} expected)" for k, t in META_KEYS.items()
             if not isinstance(meta[k], t) or (t is int and isinstance(meta[k], bool))]
    if wrong:
        raise ForethoughtError(f"{path} is corrupt: wrong type for {', '.join(wrong)}")
    if meta["method"] not in trained_method_names():
        raise ForethoughtError(f"{path} is corrupt: unknown method {meta['method']!r}")
    head_missing = [k for k in ("pooling", "hidden") if k not in meta["head"]]
    if head_missing:
        raise ForethoughtError(f"{path} is incomplete: missing key(s) head.{', head.'.join(head_missing)}")
    return meta


def _check_adapter_config(path: Path) -> None:
    """peft reads ``adapter_config.json`` with a bare ``config["peft_type"]``: check it first, so a broken file
    is a clear error and a KeyError from peft stays a bug."""
    try:
        config = json.loads(path.read_text())
    except OSError:
        raise ForethoughtError(f"cannot load the saved model: {path} is missing") from None
    except ValueError as e:
        raise ForethoughtError(f"cannot load the saved model: {path} is corrupt ({first_line(e)})") from None
    if not isinstance(config, dict) or "peft_type" not in config:
        raise ForethoughtError(f"cannot load the saved model: {path} has no peft_type")


def _describe(record: dict[str, Any]) -> str:
    source = record.get("source") if isinstance(record.get("source"), dict) else {}
    hashes = ", ".join(f"{k} {str(v)[:12]}" for k, v in sorted((record.get("weights") or {}).items()))
    return f"{record.get('resolved')} ({source.get('kind', '?')}; sha256 {hashes or 'unknown'})"


def check_base(folder: Path, meta: dict[str, Any]) -> None:
    """The base model name in ``predgen.json`` must resolve to the weights the adapter was trained on (their
    SHA-256; a hub model not in the cache: its id and revision); a one-line error naming both otherwise."""
    saved = meta.get("base_model")
    if not isinstance(saved, dict):
        raise ForethoughtError(f"{folder / 'predgen.json'} is corrupt: no base_model record")
    name = meta["base"]
    now = record_model(name, resolve_model_path(name))
    same = (now["weights"] == saved.get("weights") if now["weights"] and saved.get("weights")
            else now["source"] == saved.get("source"))
    if not same:
        raise ForethoughtError(f"the model in {folder} was trained on base '{name}' = {_describe(saved)}, but "
                               f"'{name}' now resolves to {_describe(now)}; load it where those weights are")


def load_model(folder: Path, meta: dict[str, Any]) -> tuple[PredGenModel, Any]:
    """Rebuild a saved model (eval mode) and its tokenizer from a folder and its checked ``read_meta``."""
    from forethought.models.hf import load_causal_lm

    folder = Path(folder)
    adapter = from_record(AdapterConfig, meta["adapter"], f"{folder / 'predgen.json'} adapter")
    if adapter.method not in ("full", "rocoft"):
        _check_adapter_config(folder / "adapter" / "adapter_config.json")
    try:
        if adapter.method == "full":
            lm, tok = load_causal_lm(str(folder / "lm"))
        else:
            from peft import PeftModel

            from forethought.data.tokenizers import run_tokenizer

            check_base(folder, meta)  # before the adapter goes onto it
            base, tok = load_causal_lm(meta["base"])
            tok = run_tokenizer(folder) or tok
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token
            if adapter.method == "rocoft":
                from safetensors.torch import load_file

                from forethought.models.rocoft import load_rocoft_state

                lm = apply_adapter(base, adapter, 0)
                load_rocoft_state(lm, load_file(str(folder / "adapter" / ROCOFT_FILE)), folder / "adapter")
            else:
                lm = PeftModel.from_pretrained(base, str(folder / "adapter"))
    except FILE_ERRORS as e:
        raise ForethoughtError(f"cannot load the saved model in {folder}: {first_line(e)}") from None
    hs = meta["head"]
    head = build_head(meta["method"], hidden_size(lm), meta["n_out"], hs["pooling"], hs["hidden"], None,
                      hs.get("reads", "states"), vocab_size(lm), choice_loglik=hs.get("choice_loglik", 0.0))
    if head is not None:
        from safetensors.torch import load_file

        path = folder / "head.safetensors"
        try:
            state = load_file(str(path))
        except FILE_ERRORS as e:
            raise ForethoughtError(f"{path} is missing or corrupt: {first_line(e)}") from None
        try:
            head.load_state_dict(_renamed_keys(state, head))
        except RuntimeError as e:  # load_state_dict's only error: keys or shapes unlike predgen.json's head
            raise ForethoughtError(f"{path} does not match the head in predgen.json: {first_line(e)}") from None
    model = PredGenModel(lm, head)
    model.eval()
    return model, tok
