"""Prompt / continuation passes over an HF causal LM, and constrained, KV-cached, batched decoding of answers.

Prompts are **left**-padded, so every prompt ends at the same column and answers continue from there; position
ids come from the attention mask (HF models do not derive them from the mask by themselves).

A forward over the prompt returns its KV cache as plain ``(key, value)`` pairs per layer. Continuations start
from a *fresh* cache built from those pairs, so one prompt pass can feed several continuations (teacher-forced,
mixed, model-fed) and gradients flow back through the shared prompt states into the adapters.

Answers are decoded under an :class:`AnswerTrie` of the well-formed answers (label words, or every number of
the fixed format), so a parse failure cannot happen; the greedy decoder also returns the hidden states at the
positions that predicted each answer token (what PredGen's task adapter reads).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: (B, H_kv, T, hd) keys and values


# ----------------------------------------------------------------------------------------------------------
# Passes
# ----------------------------------------------------------------------------------------------------------


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """(B, T) 0/1 attention mask -> (B, T) positions counting only real tokens (left pads get 0)."""
    return (mask.long().cumsum(-1) - 1).clamp_min(0)


def _new_cache(kv: KV | None) -> Any:
    from transformers import DynamicCache

    return DynamicCache() if kv is None else DynamicCache(ddp_cache_data=[(k, v) for k, v in kv])


def _kv_pairs(cache: Any) -> KV:
    return [(layer.keys, layer.values) for layer in cache.layers]


@dataclass
class PromptPass:
    last_logits: torch.Tensor  # (B, V) the distribution of answer token 1
    states: torch.Tensor  # (B, P, d) hidden states at the chosen layer
    kv: KV
    logits: torch.Tensor | None = None  # (B, P, V) when all positions were asked for


def prompt_pass(lm: Any, ids: torch.Tensor, mask: torch.Tensor, layer: int = -1,
                all_logits: bool = False) -> PromptPass:
    """One forward over left-padded prompts (B, P) with a KV cache."""
    out = lm(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), cache=_new_cache(None),
             use_cache=True, output_hidden_states=True, logits_to_keep=0 if all_logits else 1)
    return PromptPass(out.logits[:, -1], out.hidden_states[layer], _kv_pairs(out.cache),
                      out.logits if all_logits else None)


def continue_pass(lm: Any, kv: KV, prompt_mask: torch.Tensor, ids: torch.Tensor,
                  layer: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """Feed (B', m) tokens after cached prompts. ``kv`` and ``prompt_mask`` may have B rows with B' = r·B (the
    cache is tiled r times, rows grouped as [copy 0; copy 1; ...]). Returns logits (B', m, V) and hidden states
    at ``layer`` (B', m, d). Padding inside ``ids`` must come after the real tokens (causal: harmless)."""
    B, Bp = prompt_mask.shape[0], ids.shape[0]
    reps = Bp // B
    if reps > 1:
        kv = [(torch.cat([k] * reps), torch.cat([v] * reps)) for k, v in kv]
        prompt_mask = torch.cat([prompt_mask] * reps)
    m = ids.shape[1]
    mask = torch.cat([prompt_mask, prompt_mask.new_ones(Bp, m)], dim=1)
    pos = prompt_mask.long().sum(-1, keepdim=True) + torch.arange(m, device=ids.device)
    out = lm(input_ids=ids, attention_mask=mask, position_ids=pos, cache=_new_cache(kv), use_cache=True,
             output_hidden_states=True)
    return out.logits, out.hidden_states[layer]


def detach_kv(kv: KV) -> KV:
    return [(k.detach(), v.detach()) for k, v in kv]


# ----------------------------------------------------------------------------------------------------------
# The set of well-formed answers
# ----------------------------------------------------------------------------------------------------------


@dataclass
class _Node:
    children: dict[int, _Node] = field(default_factory=dict)
    leaf: int | None = None  # candidate index when a complete answer ends here
    allowed: torch.Tensor | None = None  # (n_children,) token ids, filled by AnswerTrie


class AnswerTrie:
    """A prefix tree over the token sequences of every well-formed answer.

    ``sequences[i]`` is candidate i's token ids (answer text tokens, then EOS when ``eos_id`` is given);
    ``values[i]`` is what it means (a label index or a number). No candidate may be a prefix of another
    (EOS makes that true for any set of distinct answers)."""

    def __init__(self, sequences: list[list[int]], values: list[Any]):
        if not sequences:
            raise ValueError("AnswerTrie needs at least one candidate")
        self.root = _Node()
        self.sequences, self.values = sequences, values
        for i, seq in enumerate(sequences):
            node = self.root
            for tok in seq:
                if node.leaf is not None:
                    raise ValueError(f"candidate {values[node.leaf]!r} is a prefix of {values[i]!r}")
                node = node.children.setdefault(int(tok), _Node())
            if node.leaf is not None or node.children:
                raise ValueError(f"candidate {values[i]!r} is a prefix of (or equal to) another")
            node.leaf = i
        self.depth = max(len(s) for s in sequences)
        self._index(self.root)

    def _index(self, node: _Node) -> None:
        node.allowed = torch.tensor(sorted(node.children), dtype=torch.long)
        for child in node.children.values():
            self._index(child)

    def internal_nodes(self) -> list[tuple[list[int], _Node]]:
        """Every node with children, with its path from the root (the root's path is empty)."""
        out, stack = [], [([], self.root)]
        while stack:
            path, node = stack.pop()
            if node.children:
                out.append((path, node))
                stack.extend((path + [t], c) for t, c in node.children.items())
        return out


# ----------------------------------------------------------------------------------------------------------
# Decoding
# ----------------------------------------------------------------------------------------------------------


@dataclass
class Decoded:
    tokens: torch.Tensor  # (B, m) chosen tokens (pad after a row's answer ends)
    mask: torch.Tensor  # (B, m) bool, True on real answer tokens
    states: torch.Tensor  # (B, m, d) the state that predicted token i (layer ``layer``)
    logprob: torch.Tensor  # (B,) sum of the chosen tokens' log-probabilities under the full softmax
    choice: list[int]  # candidate index per row
    logits: torch.Tensor | None = None  # (B, m, V) the logits that chose token i (when asked for)


@torch.no_grad()
def constrained_greedy(lm: Any, trie: AnswerTrie | list[AnswerTrie], prompt_ids: torch.Tensor,
                       prompt_mask: torch.Tensor, layer: int = -1, pad_id: int = 0,
                       prompt: PromptPass | None = None, keep_logits: bool = False) -> Decoded:
    """Greedy decoding restricted to the trie's answers, batched, one cached forward step per answer token.
    ``trie`` may be one trie per row (each example's own choices); ``choice`` indexes the row's trie.
    ``keep_logits``: also return the full logits at each answer position (what a logit-reading adapter reads)."""
    pp = prompt if prompt is not None else prompt_pass(lm, prompt_ids, prompt_mask, layer)
    B, dev = prompt_ids.shape[0], prompt_ids.device
    tries = trie if isinstance(trie, list) else [trie] * B
    if len(tries) != B:
        raise ValueError(f"{len(tries)} tries for {B} rows")
    logits, state = pp.last_logits, pp.states[:, -1]
    cache, mask = _new_cache(pp.kv), prompt_mask
    nodes: list[_Node | None] = [t.root for t in tries]
    toks, states, masks, kept = [], [], [], []
    logprob = torch.zeros(B, dtype=torch.float64, device=dev)
    choice = [-1] * B
    for _ in range(max(t.depth for t in tries)):
        live = torch.tensor([n is not None for n in nodes], device=dev)
        lp = F.log_softmax(logits.double(), dim=-1)  # (B, V)
        allowed = torch.zeros_like(lp, dtype=torch.bool)
        for b, n in enumerate(nodes):
            if n is not None:
                allowed[b, n.allowed.to(dev)] = True
        tok = lp.masked_fill(~allowed, -math.inf).argmax(-1)
        tok = torch.where(live, tok, torch.full_like(tok, pad_id))
        logprob += torch.where(live, lp.gather(1, tok[:, None])[:, 0], torch.zeros_like(logprob))
        toks.append(tok)
        states.append(state)
        if keep_logits:
            kept.append(logits)
        masks.append(live)
        for b, n in enumerate(nodes):
            if n is not None:
                child = n.children[int(tok[b])]
                if child.leaf is not None:
                    choice[b], nodes[b] = child.leaf, None
                else:
                    nodes[b] = child
        if all(n is None for n in nodes):
            break
        mask = torch.cat([mask, mask.new_ones(B, 1)], dim=1)
        out = lm(input_ids=tok[:, None], attention_mask=mask, position_ids=position_ids(mask)[:, -1:],
                 cache=cache, use_cache=True, output_hidden_states=True)
        cache, logits, state = out.cache, out.logits[:, -1], out.hidden_states[layer][:, -1]
    return Decoded(torch.stack(toks, 1), torch.stack(masks, 1), torch.stack(states, 1), logprob, choice,
                   torch.stack(kept, 1) if keep_logits else None)


@torch.no_grad()
def feed_own(lm: Any, prompt: PromptPass, prompt_mask: torch.Tensor,
             choose: Callable[[int, torch.Tensor], torch.Tensor], steps: int) -> torch.Tensor:
    """A sequential, KV-cached roll-out of ``steps`` inputs after cached prompts (left-padded, mask (B, P)): input
    t is ``choose(t, logits)`` (B,) from the logits (B, V) that followed inputs 0..t-1 (t = 0: the prompt's last
    logits), so an input can be a token the model generated from its own previous inputs (scheduled sampling).
    One forward of one token per input but the last; returns the inputs (B, steps)."""
    cache, mask, logits = _new_cache(prompt.kv), prompt_mask, prompt.last_logits
    fed = []
    for t in range(steps):
        tok = choose(t, logits)
        fed.append(tok)
        if t + 1 == steps:
            break
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        out = lm(input_ids=tok[:, None], attention_mask=mask, position_ids=position_ids(mask)[:, -1:], cache=cache,
                 use_cache=True)
        cache, logits = out.cache, out.logits[:, -1]
    return torch.stack(fed, 1) if fed else prompt_mask.new_zeros(prompt_mask.shape[0], 0, dtype=torch.long)


@torch.no_grad()
def answer_distribution(lm: Any, trie: AnswerTrie, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                        prompt: PromptPass | None = None, max_rows: int = 256) -> torch.Tensor:
    """(B, n_candidates) probability of each well-formed answer under the model, conditioned on the answer
    being well-formed: exact, by scoring every internal node of the trie with the prompt's KV cache.

    The trie is walked level by level: level l feeds one token per internal node of depth l (its path's last
    token) after its parent's cached path, so every answer prefix is fed once. For numbers 0.00-5.00 written as
    ``" d.dd"`` by a tokenizer that gives the space, each digit and the point a token of their own (SmolLM2's),
    that is 1 + 6 + 6 + 51 = 64 one-token rows per example, where one pass over the 51 four-token paths (the
    answers without their last digit) feeds 204 tokens. The prompt cache is tiled once per node of a level, so
    memory grows with examples × the widest level; each forward holds at most about ``max_rows`` (example, node)
    rows, which bounds it for any batch size."""
    pp = prompt if prompt is not None else prompt_pass(lm, prompt_ids, prompt_mask)
    B, dev = prompt_ids.shape[0], prompt_ids.device
    root_lp = F.log_softmax(pp.last_logits.double(), -1)  # (B, V)
    inner = trie.internal_nodes()
    node_of = {tuple(p): n for p, n in inner}
    levels: list[list[tuple[int, ...]]] = [[] for _ in range(max(len(p) for p, _ in inner))]
    for p in sorted(tuple(p) for p, _ in inner if p):
        levels[len(p) - 1].append(p)  # levels[l - 1]: the internal nodes of depth l
    # each internal node's children's log-probs: path -> (B, n_children), in node.allowed order
    pieces: dict[tuple[int, ...], list[torch.Tensor]] = {(): [root_lp[:, trie.root.allowed.to(dev)]]}
    g = max(1, max_rows // max((len(lv) for lv in levels), default=1))  # examples per forward
    for b0 in range(0, B, g):
        b1 = min(B, b0 + g)
        b, pm = b1 - b0, prompt_mask[b0:b1]
        kv = [(k[b0:b1], v[b0:b1]) for k, v in pp.kv]  # rows node-major: row i·b + e = node i, example e
        row_of: dict[tuple[int, ...], int] = {(): 0}
        for depth, paths in enumerate(levels, 1):
            n = len(paths)
            parent = torch.tensor([row_of[p[:-1]] for p in paths], device=dev)  # (n,)
            rows = (parent[:, None] * b + torch.arange(b, device=dev)).flatten()  # (n·b,)
            tok = torch.tensor([p[-1] for p in paths], device=dev).repeat_interleave(b)[:, None]  # (n·b, 1)
            mask = torch.cat([pm.repeat(n, 1), pm.new_ones(n * b, depth)], dim=1)
            pos = pm.long().sum(-1).repeat(n)[:, None] + depth - 1
            out = lm(input_ids=tok, attention_mask=mask, position_ids=pos,
                     cache=_new_cache([(k[rows], v[rows]) for k, v in kv]), use_cache=True)
            logits = out.logits[:, -1].view(n, b, -1)  # (n, b, V)
            logits = logits if logits.dtype == torch.float64 else logits.float()
            lse = torch.logsumexp(logits, -1).double()  # (n, b): no full-vocab float64 copy
            for i, p in enumerate(paths):
                lp = logits[i][:, node_of[p].allowed.to(dev)].double() - lse[i, :, None]
                pieces.setdefault(p, []).append(lp)
            kv, row_of = _kv_pairs(out.cache), {p: i for i, p in enumerate(paths)}
    child_lp = {key: torch.cat(v) for key, v in pieces.items()}
    scores = torch.zeros(B, len(trie.sequences), dtype=torch.float64, device=dev)
    for c, seq in enumerate(trie.sequences):
        for j, tok in enumerate(seq):
            node = node_of[tuple(seq[:j])]
            scores[:, c] += child_lp[tuple(seq[:j])][:, int((node.allowed == tok).nonzero())]
    return torch.softmax(scores, dim=-1)


@torch.no_grad()
def token_logprobs(first: torch.Tensor, logits: torch.Tensor | None, ids: torch.Tensor) -> torch.Tensor:
    """(B, L) log-probabilities of ``ids`` (B, L) after a prompt: the first token from ``first`` (B, V), the
    prompt's last log-softmax, the rest from ``logits`` (B, L-1, V), the continuation pass over ``ids[:, :-1]``
    (None when L = 1)."""
    lp = first.gather(1, ids[:, :1])
    if logits is None:
        return lp
    return torch.cat([lp, F.log_softmax(logits.float(), -1).gather(2, ids[:, 1:, None])[..., 0]], dim=1)


def choice_logprobs(lm: Any, choices: list[list[list[int]]], prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                    prompt: PromptPass | None = None) -> list[list[float]]:
    """The summed log-probability of each row's choices (token ids, no EOS) after its prompt, as lm-eval-harness
    scores a multiple-choice item: ``out[b][k]`` for row b's choice k. One cached prompt pass, then one
    teacher-forced continuation per choice position (B rows of (B, L) tokens each, so memory is one choice's
    logits (B, L, V) at a time)."""
    pp = prompt if prompt is not None else prompt_pass(lm, prompt_ids, prompt_mask)
    B, dev = prompt_ids.shape[0], prompt_ids.device
    if len(choices) != B:
        raise ValueError(f"{len(choices)} choice lists for {B} rows")
    first = F.log_softmax(pp.last_logits.float(), -1)  # (B, V): every choice's first token
    out: list[list[float]] = [[0.0] * len(c) for c in choices]
    for k in range(max(len(c) for c in choices)):
        seqs = [c[k] if k < len(c) else c[0] for c in choices]  # a row without choice k repeats its first
        L = max(len(s) for s in seqs)
        ids = torch.zeros(B, L, dtype=torch.long, device=dev)
        mask = torch.zeros(B, L, dtype=torch.bool, device=dev)
        for b, s in enumerate(seqs):
            ids[b, :len(s)] = torch.tensor(s, device=dev)
            mask[b, :len(s)] = True
        logits = continue_pass(lm, pp.kv, prompt_mask, ids[:, :-1])[0] if L > 1 else None  # predicts 2..L
        lp = token_logprobs(first, logits, ids)  # (B, L)
        sums = (lp.double() * mask).sum(1).tolist()  # (B,)
        for b, c in enumerate(choices):
            if k < len(c):
                out[b][k] = sums[b]
    return out
