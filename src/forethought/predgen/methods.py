"""The three methods' training losses and predictions: Predictor, Generator and PredGen (prediction through
generation, as the PredGen paper proposes).

All three share the encoding: a prompt (left-padded) and the answer tokens (``" " + answer text`` then EOS,
right-padded). One prompt pass with a KV cache is shared by every continuation of a step:

* Predictor: pooled prompt state -> head; cross-entropy (classes) or MSE (regression).
* Generator: teacher-forced cross-entropy on the answer tokens (the prompt masked by default).
* PredGen: (1) scheduled sampling decides which answer inputs the model's own token replaces (probability
  p(step), per token, sequence or batch) and (2) a sequential KV-cached roll-out without grad feeds them: each
  replaced input is the token the model generated after the inputs before it, its own included
  (``--predgen.own_tokens one_pass``: the argmax of one teacher-forced pass instead, an approximation);
  (3) a constrained greedy roll-out (no grad, a few cached steps) gives a fully model-fed answer; (4) one
  continuation with grad over [mixed rows; roll-out rows] gives the writer's loss L_W (mixed rows, against the
  gold tokens) and the task adapter's input Z (roll-out rows: the states that predicted answer tokens 1..m,
  none of which saw a gold answer token, so the adapter cannot learn to read the label); (5) L = WDAL(L_W, L_D).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from tqdm.auto import tqdm

from forethought.core.accumulate import AveragedLoss, Rows
from forethought.core.errors import ForethoughtError
from forethought.predgen.config import PredGenConfig, PredGenSettings, PromptConfig  # their home imports no torch
from forethought.predgen.decoding import (
    AnswerTrie,
    PromptPass,
    answer_distribution,
    choice_logprobs,
    constrained_greedy,
    continue_pass,
    detach_kv,
    feed_own,
    prompt_pass,
    token_logprobs,
)
from forethought.predgen.losses import (
    replace_mask,
    sample_by_uniform,
    sampling_probability,
    wdal_paper,
    wdal_reference,
)
from forethought.predgen.model import AdapterInput, ChoiceStates, PredGenModel
from forethought.predgen.registry import Generator, LossFn, Method, PredGen, Predictor, method_named
from forethought.predgen.tasks import Example, TaskSpec, format_target, parse_target, render_prompt

MAX_CANDIDATES = 20_000


# ----------------------------------------------------------------------------------------------------------
# Encoding
# ----------------------------------------------------------------------------------------------------------


class Encoder:
    """Turns examples into token ids and, when ``decode`` (the generating methods), knows every well-formed answer
    of the task: ``values``, ``texts`` and the ``trie`` (``number_trie``: the numbers without EOS, regression).
    The Predictor never decodes, so it builds none of them (a regression range can hold too many numbers)."""

    def __init__(self, spec: TaskSpec, tokenizer: Any, prompt: PromptConfig, decode: bool = True):
        self.spec, self.tok, self.cfg = spec, tokenizer, prompt
        if prompt.truncate_side:
            if prompt.truncate_side not in ("left", "right"):
                raise ForethoughtError(f"prompt.truncate_side must be left, right or '', got '{prompt.truncate_side}'")
            spec.truncate_side = prompt.truncate_side  # type: ignore[assignment]
        if tokenizer.eos_token_id is None:
            raise ForethoughtError("the tokenizer has no EOS token; answers need one to end")
        self.eos_id = int(tokenizer.eos_token_id)
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id)
        self.values: list[Any] | None = None
        self.texts: list[str] | None = None
        self.trie: AnswerTrie | None = None
        self.number_trie: AnswerTrie | None = None
        self.text_answers = spec.answer == "text"  # per-example choices: each item carries its own trie
        if decode and self.text_answers:
            self.values = list(range(len(spec.labels)))
        elif decode:
            self.values, self.texts = self.candidates()
            seqs = [self.answer_tokens(t) for t in self.texts]
            self.trie = AnswerTrie([s + [self.eos_id] for s in seqs], self.values)
            try:  # expected-value decoding only needs the number's own tokens (the format is fixed)
                self.number_trie = AnswerTrie(seqs, self.values) if spec.task_type == "regression" else None
            except ValueError:
                self.number_trie = self.trie

    @property
    def n_out(self) -> int:
        return len(self.spec.labels) if self.spec.task_type == "classification" else 1

    def candidates(self) -> tuple[list[Any], list[str]]:
        """Every well-formed answer: label indices and words, or all numbers of the fixed format in range."""
        spec = self.spec
        if spec.task_type == "classification":
            return list(range(len(spec.labels))), list(spec.labels)
        if spec.value_range is None:
            raise ForethoughtError(f"task '{spec.name}' has no value range; constrained decoding needs one")
        lo, hi = spec.value_range
        scale = 10 ** self.cfg.decimals
        n = int(round((hi - lo) * scale)) + 1
        if n > MAX_CANDIDATES:
            raise ForethoughtError(f"{n} well-formed numbers in [{lo}, {hi}] with {self.cfg.decimals} decimals is too "
                                   f"many (max {MAX_CANDIDATES}); lower prompt.decimals")
        texts = sorted({format_target(spec, lo + i / scale, self.cfg.decimals) for i in range(n)}, key=float)
        return [float(t) for t in texts], texts

    def answer_tokens(self, text: str) -> list[int]:
        return list(self.tok(" " + text, add_special_tokens=False)["input_ids"])

    def answer_text(self, ex: Example) -> str:
        """What the generator writes for the example's target: its choice text, label word or number."""
        if self.text_answers:
            return self._options(ex)[str(ex.target)]
        return format_target(self.spec, ex.target, self.cfg.decimals)

    def _options(self, ex: Example) -> dict[str, str]:
        if not ex.options:
            raise ForethoughtError(f"example {ex.id}: text answers need the example's choices, and it has none")
        return ex.options

    def choices(self, ex: Example) -> list[tuple[int, str]]:
        """The example's own choices as (class index, answer text): a multiple-choice item's present options
        (their text, or their label word), else every label of the task (label-word classification)."""
        if self.spec.task_type != "classification":
            raise ForethoughtError(f"task '{self.spec.name}' is a regression task: it has no choices")
        if not ex.options:
            if self.text_answers:
                self._options(ex)
            return list(enumerate(self.spec.labels))
        unknown = [k for k in ex.options if k not in self.spec.labels]
        if unknown:
            raise ForethoughtError(f"example {ex.id}: choice(s) {unknown} are not labels of {self.spec.labels}")
        return [(self.spec.labels.index(k), t if self.text_answers else k) for k, t in ex.options.items()]

    def present(self, ex: Example) -> list[bool]:
        """(C,) which classes are choices of this example (an ARC item with 4 choices has no E)."""
        if not ex.options:
            return [True] * len(self.spec.labels)
        return [label in ex.options for label in self.spec.labels]

    def example_trie(self, ex: Example) -> AnswerTrie:
        """The trie of one example's own choices: its values are the choices' class indices."""
        pairs = self.choices(ex)
        seqs = [self.answer_tokens(t) + [self.eos_id] for _, t in pairs]
        try:
            return AnswerTrie(seqs, [c for c, _ in pairs])
        except ValueError:
            raise ForethoughtError(f"example {ex.id}: two choices have the same text") from None

    def tries(self, batch: dict[str, Any]) -> AnswerTrie | list[AnswerTrie]:
        """What a batch decodes under: one trie per row (multiple choice: each example's own choices), or the
        task's trie."""
        return batch["tries"] if "tries" in batch else self.trie

    def prompt_tokens(self, ex: Example) -> list[int]:
        text = render_prompt(self.spec, ex, self.tok, self.cfg.max_prompt_tokens, self.cfg.chat)
        # a rendered chat template already holds its special tokens (BOS): tokenising it with them would
        # add a second BOS
        chat = self.cfg.chat and bool(getattr(self.tok, "chat_template", None))
        ids = list(self.tok(text, add_special_tokens=not chat)["input_ids"])
        return ids[-(self.cfg.max_prompt_tokens + 2):]  # a BOS the tokenizer adds is allowed on top

    def target(self, ex: Example) -> int | float:
        if self.spec.task_type == "classification":
            if ex.target not in self.spec.labels:
                raise ForethoughtError(f"example {ex.id}: label {ex.target!r} is not one of {self.spec.labels}")
            return self.spec.labels.index(ex.target)
        return float(format_target(self.spec, ex.target, 10))  # clipped to the range

    def encode(self, examples: list[Example], with_targets: bool = True) -> list[dict[str, Any]]:
        out = []
        for ex in examples:
            item: dict[str, Any] = {"prompt": self.prompt_tokens(ex), "id": ex.id}
            if self.spec.task_type == "classification":
                item["present"] = self.present(ex)
                if self.values is not None and (ex.options or self.text_answers):
                    item["trie"] = self.example_trie(ex)
                if self.values is not None:  # the rank decoder's candidates: (class, tokens without EOS, chars)
                    item["choices"] = [(c, self.answer_tokens(t), len(" " + t)) for c, t in self.choices(ex)]
            if with_targets:
                item["target"] = self.target(ex)
                item["answer"] = self.answer_tokens(self.answer_text(ex)) + [self.eos_id]
            out.append(item)
        return out

    def collate(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Left-padded prompts (B, P), right-padded answers (B, M), targets (B,)."""
        B, P = len(items), max(len(i["prompt"]) for i in items)
        batch: dict[str, Any] = {"prompt_ids": torch.full((B, P), self.pad_id, dtype=torch.long),
                                 "prompt_mask": torch.zeros(B, P, dtype=torch.long)}
        for b, it in enumerate(items):
            n = len(it["prompt"])
            batch["prompt_ids"][b, P - n:] = torch.tensor(it["prompt"])
            batch["prompt_mask"][b, P - n:] = 1
        if "trie" in items[0]:
            batch["tries"] = Rows(it["trie"] for it in items)  # per row: split with the batch (grad_accum, DDP)
        if "choices" in items[0]:
            batch["choices"] = Rows(it["choices"] for it in items)
        if "present" in items[0]:
            batch["present"] = torch.tensor([it["present"] for it in items], dtype=torch.bool)  # (B, C)
        if "answer" in items[0]:
            M = max(len(i["answer"]) for i in items)
            batch["answer_ids"] = torch.full((B, M), self.pad_id, dtype=torch.long)
            batch["answer_mask"] = torch.zeros(B, M, dtype=torch.bool)
            for b, it in enumerate(items):
                batch["answer_ids"][b, :len(it["answer"])] = torch.tensor(it["answer"])
                batch["answer_mask"][b, :len(it["answer"])] = True
            dtype = torch.long if self.spec.task_type == "classification" else torch.float32
            batch["target"] = torch.tensor([i["target"] for i in items], dtype=dtype)
        return batch


# ----------------------------------------------------------------------------------------------------------
# Losses
# ----------------------------------------------------------------------------------------------------------


def mask_absent(logits: torch.Tensor, present: torch.Tensor | None) -> torch.Tensor:
    """Class logits (B, C) with an example's absent choices at -inf (zero probability; never the argmax).
    ``present`` (B, C) bool, or None (every class is a choice)."""
    if present is None:
        return logits
    return logits.float().masked_fill(~present.to(logits.device), -torch.inf)


def task_loss(out: torch.Tensor, target: torch.Tensor, task_type: str, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy for classes (out (B, C), target (B,) long), MSE for regression (out (B, 1)); ``reduction``
    mean or sum over the rows."""
    if task_type == "classification":
        return F.cross_entropy(out.float(), target, reduction=reduction)
    return F.mse_loss(out.float()[:, 0], target.float(), reduction=reduction)


def token_ce(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy over masked tokens and the token count. logits (B, T, V), targets/mask (B, T)."""
    ce = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)
    return (ce * mask).sum(), mask.sum()


def writer_sums(pp: PromptPass, answer_logits: torch.Tensor, batch: dict[str, Any], mask_prompt: bool
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy of the answer tokens (B, M) — and of the prompt's when it is not masked — and the
    token count: the writer's loss is their ratio, a token average (see core/accumulate.py for why sums)."""
    total, count = token_ce(answer_logits, batch["answer_ids"], batch["answer_mask"])
    if not mask_prompt:
        pm = batch["prompt_mask"].bool()
        ptotal, pcount = token_ce(pp.logits[:, :-1], batch["prompt_ids"][:, 1:], pm[:, 1:] & pm[:, :-1])
        total, count = total + ptotal, count + pcount
    return total, count


def _answer_logits(lm: Any, pp: PromptPass, kv: Any, batch: dict[str, Any]) -> torch.Tensor:
    """Teacher-forced logits (B, M, V) predicting answer tokens 1..M."""
    gold = batch["answer_ids"]
    first = pp.last_logits.unsqueeze(1)
    if gold.shape[1] == 1:
        return first
    rest, _ = continue_pass(lm, kv, batch["prompt_mask"], gold[:, :-1])
    return torch.cat([first, rest], dim=1)


def predictor_loss(m: PredGenModel, batch: dict[str, Any], task_type: str, layer: int) -> tuple[torch.Tensor, dict]:
    pp = prompt_pass(m.lm, batch["prompt_ids"], batch["prompt_mask"], layer)
    loss = task_loss(mask_absent(m.head(pp.states, batch["prompt_mask"]), batch.get("present")), batch["target"],
                     task_type)
    return loss, {}


def generator_loss(m: PredGenModel, batch: dict[str, Any], mask_prompt: bool) -> tuple[AveragedLoss, dict]:
    """The answer tokens' average cross-entropy (the trainer averages it over the whole batch's tokens)."""
    pp = prompt_pass(m.lm, batch["prompt_ids"], batch["prompt_mask"], all_logits=not mask_prompt)
    total, count = writer_sums(pp, _answer_logits(m.lm, pp, pp.kv, batch), batch, mask_prompt)
    return AveragedLoss({"l_w": total}, {"l_w": count}), {}


def _pad_to(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
    return F.pad(x, (0, width - x.shape[1]), value=value)


def with_sampling(batch: dict[str, Any], p: float, seed: int) -> dict[str, Any]:
    """``batch`` with PredGen's scheduled-sampling inputs: ``p`` (this step's probability), ``uniform`` (B, M, 2),
    seeded uniforms per example and answer position — [..., 0] the coins, [..., 1] the sampled tokens — and
    ``coin``, one uniform for the whole batch (``--predgen.per batch``). The uniforms travel with their rows and the
    coin is kept whole, so no draw depends on how the batch is split into micro-batches or processes."""
    B, M = batch["answer_ids"].shape
    g = torch.Generator().manual_seed(seed)
    uniform = torch.rand(B, M, 2, generator=g)
    return {**batch, "p": p, "uniform": uniform, "coin": float(torch.rand(1, generator=g))}


def own_token(logits: torch.Tensor, tokens: str, uniform: torch.Tensor) -> torch.Tensor:
    """The model's token from logits (..., V): the argmax (``greedy``), or drawn from the softmax by ``uniform``
    (...) (``sampled``)."""
    if tokens == "greedy":
        return logits.argmax(-1)
    return sample_by_uniform(torch.softmax(logits.double(), -1), uniform.to(logits.device, torch.float64))


@torch.no_grad()
def scheduled_inputs(lm: Any, pp: PromptPass, batch: dict[str, Any], s: PredGenSettings) -> torch.Tensor:
    """The answer inputs (B, M-1) of the writer's scheduled-sampling pass (``pp``: the prompt pass, its cache
    detached). Input i holds answer token i, replaced by the model's own token where :func:`replace_mask` says
    (only where a next answer token exists). ``s.own_tokens``: ``rollout`` feeds the inputs one by one, so a
    replacing token is the one the model generates after the inputs before it, its own tokens included (the
    paper's scheduled sampling; with a per-batch coin the reference code's greedy roll-out); ``one_pass`` takes it
    from one teacher-forced pass over the gold prefix (cheaper; the token after a replaced one is the model's
    choice after the gold token, so it approximates the roll-out)."""
    gold, amask, u = batch["answer_ids"], batch["answer_mask"], batch["uniform"]
    inputs = gold[:, :-1]
    replace = replace_mask(amask[:, 1:], float(batch["p"]), s.per, u[:, :-1, 0], batch.get("coin"))  # (B, M-1)
    if not replace.any():
        return inputs.clone()
    u_tok = u[..., 1]
    if s.own_tokens == "one_pass":
        own = own_token(_answer_logits(lm, pp, pp.kv, batch)[:, :-1], s.tokens, u_tok[:, :-1])  # (B, M-1)
        return torch.where(replace, own, inputs)
    last = int(replace.any(0).nonzero().max()) + 1  # the inputs after the last replaced one stay gold

    def choose(t: int, logits: torch.Tensor) -> torch.Tensor:
        return torch.where(replace[:, t], own_token(logits, s.tokens, u_tok[:, t]), inputs[:, t])

    return torch.cat([feed_own(lm, pp, batch["prompt_mask"], choose, last), inputs[:, last:]], dim=1)


def predgen_loss(m: PredGenModel, batch: dict[str, Any], s: PredGenSettings, enc: Encoder, task_type: str,
                 layer: int, mask_prompt: bool) -> tuple[AveragedLoss, dict]:
    """One PredGen step (see the module docstring), on a batch :func:`with_sampling` prepared. The loss is
    WDAL(L_W, L_D) of the token-averaged L_W and the row-averaged L_D (combined over the whole batch by the
    trainer)."""
    lm = m.lm
    gold, amask, pmask = batch["answer_ids"], batch["answer_mask"], batch["prompt_mask"]
    B, M = gold.shape
    with record_function("predgen.prompt_pass"):  # the labels time a step's parts (predgen speed)
        pp = prompt_pass(lm, batch["prompt_ids"], pmask, layer, all_logits=not mask_prompt)
    kv0 = detach_kv(pp.kv)
    fixed = PromptPass(pp.last_logits.detach(), pp.states.detach(), kv0)  # the no-grad passes start from it
    with record_function("predgen.scheduled_sampling"):
        mixed = scheduled_inputs(lm, fixed, batch, s)  # (B, M-1)
    third = gold[:, :-1]
    roll = None
    if s.adapter_states == "rollout":
        with torch.no_grad(), record_function("predgen.rollout"):
            roll = constrained_greedy(lm, enc.tries(batch), batch["prompt_ids"], pmask, layer, enc.pad_id,
                                      prompt=fixed)
        third = roll.tokens[:, :-1]
    width = max(M - 1, third.shape[1])
    first_state = pp.states[:, -1:]  # (B, 1, d): the state that predicts answer token 1
    if width > 0:
        rows = torch.cat([_pad_to(mixed, width, enc.pad_id), _pad_to(third, width, enc.pad_id)])
        with record_function("predgen.continuation"):
            logits, states = continue_pass(lm, pp.kv, pmask, rows, layer)  # (2B, width, V), (2B, width, d)
        w_logits = torch.cat([pp.last_logits.unsqueeze(1), logits[:B, :M - 1]], dim=1)
        z_rows = states[:B] if s.adapter_states == "mixed" else states[B:]
        z_logit_rows = logits[:B] if s.adapter_states == "mixed" else logits[B:]
    else:
        w_logits, z_rows = pp.last_logits.unsqueeze(1), first_state[:, :0]
        z_logit_rows = w_logits[:, :0]
    z_len = roll.tokens.shape[1] if s.adapter_states == "rollout" else M
    z_mask = roll.mask if s.adapter_states == "rollout" else amask
    z = torch.cat([first_state, z_rows[:, :z_len - 1]], dim=1)  # (B, m, d)
    inp = AdapterInput(z, z_mask)
    if m.head.reads == "logits":  # the logits at Z's positions: each predicted an answer token
        inp.logits = torch.cat([pp.last_logits.unsqueeze(1), z_logit_rows[:, :z_len - 1]], dim=1)  # (B, m, V)
    elif m.head.reads == "choices":
        with record_function("predgen.choices"):
            inp.choices = choice_states(lm, pp, pmask, batch["choices"], enc.eos_id, layer,
                                        loglik=m.head.beta is not None)
    with record_function("predgen.losses"):
        w_total, w_count = writer_sums(pp, w_logits, batch, mask_prompt)
        d_total = task_loss(mask_absent(m.head.read(inp), batch.get("present")), batch["target"], task_type,
                            reduction="sum")
    wdal = {"paper": wdal_paper, "reference": wdal_reference, "sum": lambda a, b: a + b}[s.wdal]
    return AveragedLoss({"l_w": w_total, "l_d": d_total}, {"l_w": w_count, "l_d": B},
                        combine=lambda mean: wdal(mean["l_w"], mean["l_d"])), {"p": float(batch["p"])}


@torch.no_grad()
def choice_states(lm: Any, pp: PromptPass, prompt_mask: torch.Tensor, choices: list[list[tuple[int, list[int], int]]],
                  eos_id: int, layer: int, loglik: bool = False) -> ChoiceStates:
    """Each row's choices (class, answer tokens, chars) read by the model after the prompt: the states at
    ``layer`` that predict the choice's tokens and EOS (the prompt's last state, then one after each token), as
    Z holds them for the answer the model wrote. ``loglik``: also each choice's summed token log-probability
    (EOS excluded: the rank decoder's score), from the same pass. No gradient: the adapter learns to compare, not
    the LM."""
    B, K = len(choices), max(len(c) for c in choices)
    seqs = [[toks + [eos_id] for _, toks, _ in c] for c in choices]
    L = max(len(s) for row in seqs for s in row)
    d, dev = pp.states.shape[-1], pp.states.device
    states = torch.zeros(B, K, L, d, dtype=pp.states.dtype, device=dev)
    mask = torch.zeros(B, K, L, dtype=torch.bool, device=dev)
    classes = torch.full((B, K), -1, dtype=torch.long, device=dev)
    ll = torch.zeros(B, K, dtype=torch.float64, device=dev) if loglik else None
    first = F.log_softmax(pp.last_logits.float(), -1) if loglik else None  # (B, V): every choice's first token
    kv = detach_kv(pp.kv)
    for k in range(K):
        rows = [row[k] if k < len(row) else row[0] for row in seqs]  # a row without choice k repeats its first
        ids = torch.stack([F.pad(torch.tensor(r, device=dev), (0, L - len(r)), value=eos_id) for r in rows])
        st = pp.states[:, -1:].detach()
        logits = None
        if L > 1:
            logits, rest = continue_pass(lm, kv, prompt_mask, ids[:, :-1], layer)  # (B, L-1, V), (B, L-1, d)
            st = torch.cat([st, rest], dim=1)
        states[:, k] = st
        if ll is not None:
            lp = token_logprobs(first, logits, ids)  # (B, L)
            n_tok = torch.tensor([len(r) - 1 for r in rows], device=dev)  # the choice's tokens, EOS excluded
            ll[:, k] = (lp.double() * (torch.arange(L, device=dev) < n_tok[:, None])).sum(1)
        for b, row in enumerate(seqs):
            if k < len(row):
                mask[b, k, :len(row[k])] = True
                classes[b, k] = choices[b][k][0]
    return ChoiceStates(states, mask, classes, ll)


def sampling_p(s: PredGenSettings, step: int, total_steps: int) -> float:
    return sampling_probability(step, s.ramp_steps or total_steps, s.schedule, s.p_start, s.p_end)


# Each method's loss is registered here for its registry class (dispatch on the method object; a subclass
# inherits its parent's), so the torch-free registry never imports this module.
@functools.singledispatch
def training_loss(method: Method, cfg: PredGenConfig, enc: Encoder) -> LossFn:
    """The trainer's ``loss_fn(model, batch)`` for a run of ``method`` with ``cfg`` on ``enc``'s task."""
    raise ForethoughtError(f"the {method.name} method trains nothing")


@training_loss.register(Predictor)
def _predictor_training_loss(method: Predictor, cfg: PredGenConfig, enc: Encoder) -> LossFn:
    task_type, layer = enc.spec.task_type, cfg.layer
    return lambda m, b: m(predictor_loss, b, task_type, layer)


@training_loss.register(Generator)
def _generator_training_loss(method: Generator, cfg: PredGenConfig, enc: Encoder) -> LossFn:
    mask_prompt = cfg.mask_prompt
    return lambda m, b: m(generator_loss, b, mask_prompt)


@training_loss.register(PredGen)
def _predgen_training_loss(method: PredGen, cfg: PredGenConfig, enc: Encoder) -> LossFn:
    s, task_type, layer, mask_prompt = cfg.predgen, enc.spec.task_type, cfg.layer, cfg.mask_prompt
    return lambda m, b: m(predgen_loss, b, s, enc, task_type, layer, mask_prompt)


# ----------------------------------------------------------------------------------------------------------
# Prediction
# ----------------------------------------------------------------------------------------------------------


@dataclass
class Predictions:
    prediction: list[Any]  # the method's answer: class index or number (PredGen: the adapter's)
    decoded: list[Any] | None  # generator/predgen: the constrained-decoded answer (class index or number)
    decoded_text: list[str] | None
    expected: list[float] | None  # regression, decoder=expected: E[y] over every well-formed number
    rank: list[int] | None  # classification, decoder=rank: the choice of highest summed log-probability
    rank_norm: list[int] | None  # ... of highest log-probability per character (lm-eval-harness's acc_norm)
    probs: list[list[float]] | None  # classification heads (predictor, predgen): each class's probability
    parse_failures: int
    seconds: float


def agreement(preds: Predictions, with_decoded: bool) -> dict[str, float]:
    """How often the prediction is the same answer as the model's other answers: its rank decoders' (``rank``,
    ``rank_norm``, when ranked) and, ``with_decoded`` (a head reading the answer it wrote), its own written answer
    (``decoded``). A head that agrees with the rank decoder on nearly every item adds nothing to it."""
    n = len(preds.prediction)
    others = {"rank": preds.rank, "rank_norm": preds.rank_norm, "decoded": preds.decoded if with_decoded else None}
    return {k: sum(a == b for a, b in zip(preds.prediction, v, strict=True)) / n
            for k, v in others.items() if v is not None and n}


def batches(items: list[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


@torch.no_grad()
def predict(m: PredGenModel, method: Method | str, enc: Encoder, items: list[dict[str, Any]], batch_size: int,
            layer: int, expected: bool = False, device: torch.device | str = "cpu", rank: bool = False
            ) -> Predictions:
    """Predictions for encoded items, in order. No gold information is used (targets may be absent).
    ``method`` (or its name): a head without decoding reads the prompt (Predictor); a method that decodes
    predicts its answer (Generator, base) or, with a head, the head's reading of that answer (PredGen).
    ``rank`` (classification): also rank each item's choices by their log-likelihood after the prompt."""
    method = method_named(method)
    m.eval()
    task_type = enc.spec.task_type
    pred: list[Any] = []
    decoded: list[Any] = []
    texts: list[str] = []
    ev: list[float] = []
    ranked: list[int] = []
    ranked_norm: list[int] = []
    probs: list[list[float]] = []
    rank = rank and task_type == "classification" and method.decodes
    failures = 0
    t0 = time.perf_counter()
    n_batches = -(-len(items) // batch_size)
    for chunk in tqdm(batches(items, batch_size), total=n_batches, desc=f"predict ({method.name})",
                      mininterval=5, disable=n_batches < 2):
        b = enc.collate([{k: i[k] for k in ("prompt", "trie", "present", "choices") if k in i} for i in chunk])
        present = b.get("present")
        ids, mask = b["prompt_ids"].to(device), b["prompt_mask"].to(device)
        pp = prompt_pass(m.lm, ids, mask, layer)  # one prompt pass serves the head, the decoder and E[y]
        if not method.decodes:  # its head reads the prompt
            out = mask_absent(m.head(pp.states, mask), present)
            pred += _from_head(out, task_type)
            probs += torch.softmax(out.float(), -1).tolist() if task_type == "classification" else []
            continue
        tries = enc.tries(b)
        reads = getattr(m.head, "reads", None) if method.has_head else None
        d = constrained_greedy(m.lm, tries, ids, mask, layer, enc.pad_id, prompt=pp, keep_logits=reads == "logits")
        per_row = tries if isinstance(tries, list) else [tries] * len(chunk)  # one trie per row
        values = [t.values[c] for t, c in zip(per_row, d.choice, strict=True)]
        for row, tok in zip(d.mask.cpu(), d.tokens.cpu(), strict=True):
            text = enc.tok.decode(tok[row].tolist(), skip_special_tokens=True)
            texts.append(text)
            failures += not enc.text_answers and parse_target(enc.spec, text) is None  # a choice's text: none
        decoded += values
        if method.has_head:  # its head reads the answer it wrote
            inp = AdapterInput(d.states, d.mask, d.logits)
            if reads == "choices":
                inp.choices = choice_states(m.lm, pp, mask, b["choices"], enc.eos_id, layer,
                                            loglik=m.head.beta is not None)
            out = mask_absent(m.head.read(inp), present)
            pred += _from_head(out, task_type)
            probs += torch.softmax(out.float(), -1).tolist() if task_type == "classification" else []
        else:
            pred += values
        if rank:
            cands = b["choices"]
            lps = choice_logprobs(m.lm, [[toks for _, toks, _ in c] for c in cands], ids, mask, prompt=pp)
            for c, lp in zip(cands, lps, strict=True):
                ranked.append(c[max(range(len(c)), key=lambda k: lp[k])][0])
                ranked_norm.append(c[max(range(len(c)), key=lambda k: lp[k] / c[k][2])][0])
        if expected and task_type == "regression":
            dist = answer_distribution(m.lm, enc.number_trie, ids, mask, prompt=pp)  # (B, n_candidates)
            ev += (dist @ torch.tensor(enc.values, dtype=torch.float64, device=dist.device)).tolist()
    seconds = time.perf_counter() - t0
    gen = method.decodes
    return Predictions(pred, decoded if gen else None, texts if gen else None, ev if ev else None,
                       ranked if rank else None, ranked_norm if rank else None, probs or None, failures, seconds)


def _from_head(out: torch.Tensor, task_type: str) -> list[Any]:
    return out.argmax(-1).tolist() if task_type == "classification" else out[:, 0].tolist()
