"""Prompts: a task's template filled with an example's fields, kept within a token budget by cutting the task's
long field (never dropping the example), optionally wrapped in the model's chat template."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from forethought.core.errors import ForethoughtError, first_line
from forethought.predgen.tasks.spec import Example, TaskSpec

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def render_prompt(
    spec: TaskSpec,
    ex: Example,
    tokenizer: PreTrainedTokenizerBase | None = None,
    max_prompt_tokens: int | None = None,
    chat: bool = False,
) -> str:
    """The prompt for one example: ``spec.template`` filled with its fields.

    With ``max_prompt_tokens`` (which needs a tokenizer) the prompt is kept within that many tokens, counted
    on the returned string encoded without special tokens (so a BOS token the caller adds comes on top).
    When it is longer, ``spec.long_field`` is cut (from ``spec.truncate_side``) to the longest prefix or
    suffix that fits, so the rest of the prompt (e.g. BoolQ's question) stays whole. If even an empty long
    field does not fit (or the task has none), the long field is emptied and the whole prompt is cut from the
    left, keeping its end (the question and the answer cue). Examples are never dropped.

    With ``chat=True`` and a tokenizer that has a chat template, the prompt becomes one user message,
    rendered with ``apply_chat_template(..., add_generation_prompt=True, tokenize=False)``; the budget then
    covers the whole wrapped text. Without a chat template the plain prompt is returned.
    """
    text = _fill_template(spec, ex.fields, ex.id)
    use_chat = chat and tokenizer is not None and getattr(tokenizer, "chat_template", None)
    wrap: Callable[[str], str] = (lambda s: _chat_wrap(tokenizer, s)) if use_chat else (lambda s: s)
    if max_prompt_tokens is None:
        return wrap(text)
    if tokenizer is None:
        raise ForethoughtError("render_prompt: max_prompt_tokens needs a tokenizer to count tokens")
    if isinstance(max_prompt_tokens, bool) or not isinstance(max_prompt_tokens, int) or max_prompt_tokens < 1:
        raise ForethoughtError(f"max_prompt_tokens must be a positive integer, got {max_prompt_tokens!r}")

    def fits(content: str) -> bool:
        return len(_encode(tokenizer, wrap(content))) <= max_prompt_tokens

    if fits(text):
        return wrap(text)
    fields = dict(ex.fields)
    long_field = spec.long_field
    if long_field is not None and long_field in fields:
        value = fields[long_field]
        n_long, cut_long = _token_cuts(tokenizer, value, keep_start=spec.truncate_side == "right")

        def with_long(k: int) -> str:
            return _fill_template(spec, {**fields, long_field: cut_long(k)}, ex.id)

        best = _largest_fitting(n_long, lambda k: fits(with_long(k)))
        if best is not None:
            return wrap(with_long(best))
        fields[long_field] = ""
    content = _fill_template(spec, fields, ex.id)
    n_all, cut_all = _token_cuts(tokenizer, content, keep_start=False)
    best = _largest_fitting(n_all, lambda k: fits(cut_all(k)))
    if best is None:
        raise ForethoughtError(
            f"max_prompt_tokens={max_prompt_tokens} is too small: the chat template alone needs more tokens"
        )
    return wrap(cut_all(best))



def _fill_template(spec: TaskSpec, fields: dict[str, str], example_id: str) -> str:
    try:
        return spec.template.format(**fields)
    except KeyError as e:
        present = ", ".join(fields) or "(none)"
        raise ForethoughtError(
            f"task '{spec.name}': template field {e} is missing from example '{example_id}' (fields: {present})"
        ) from None
    except (IndexError, ValueError, AttributeError) as e:
        raise ForethoughtError(f"task '{spec.name}': bad template {spec.template!r}: {first_line(e)}") from None


def _chat_wrap(tokenizer: Any, text: str) -> str:
    messages = [{"role": "user", "content": text}]
    return str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _token_cuts(tokenizer: Any, text: str, keep_start: bool) -> tuple[int, Callable[[int], str]]:
    """(n, cut): n = the text's token count; ``cut(k)`` = the text cut to its first (keep_start) or last k tokens.

    Cuts are made on the original string at token boundaries (offsets from fast tokenizers; slow ones decode
    the kept ids), so the kept text is unchanged apart from whitespace at the cut.
    """
    if getattr(tokenizer, "is_fast", False):  # fast (Rust) tokenizers give character offsets per token
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = [tuple(o) for o in encoded["offset_mapping"]]
        n = len(offsets)

        def cut_offsets(k: int) -> str:
            if k <= 0:
                return ""
            return text[: offsets[k - 1][1]].rstrip() if keep_start else text[offsets[n - k][0] :].lstrip()

        return n, cut_offsets
    ids = _encode(tokenizer, text)
    n = len(ids)

    def cut_ids(k: int) -> str:
        if k <= 0:
            return ""
        part = ids[:k] if keep_start else ids[n - k :]
        decoded = str(tokenizer.decode(part, clean_up_tokenization_spaces=False)).strip("\ufffd")
        return decoded.rstrip() if keep_start else decoded.lstrip()

    return n, cut_ids


def _largest_fitting(high: int, fits: Callable[[int], bool]) -> int | None:
    """The largest k in 0..high with fits(k) (binary search; fits is about monotone), or None if not fits(0)."""
    if not fits(0):
        return None
    low = 0
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low
