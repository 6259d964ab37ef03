"""Prediction tasks for PredGen: loading examples, rendering prompts, and the answer text a generator writes.

A task is a :class:`TaskSpec` (what kind of target, which label words, the prompt template) plus a list of
:class:`Example` per split. Two splits exist, ``train`` and ``eval``.

Built-in tasks, read from the data root (``$FORETHOUGHT_DATA``; layouts as in the data folder's SOURCES.md),
else from the Hugging Face hub when the optional ``datasets`` package is installed and the hub is reachable:

============== ======================================= ====================================================
task           train                                   eval
============== ======================================= ====================================================
sst2           sst2/train.tsv (67,349)                 sst2/dev.tsv (872)
boolq          80 % of boolq/val.jsonl (seeded)        the other 20 % (only the validation set is public
                                                       offline; the hub copy is split the same way)
arc-easy       arc/ARC-Easy-Dev.jsonl (570)            arc/ARC-Easy-Test.jsonl (2,376)
arc-challenge  arc/ARC-Challenge-Dev.jsonl (299)       arc/ARC-Challenge-Test.jsonl (1,172)
piqa           80 % of piqa/valid.jsonl (seeded)       the other 20 %
stsb           stsb/sts-train.csv (5,749)              stsb/sts-dev.csv (1,500)
sick           SICK.txt rows with SemEval_set TRAIN    rows with SemEval_set TEST (4,906); the 495 TRIAL
               (4,439)                                 rows are ignored, so train is SemEval's training set
wassa-<emo>    wassa2017/<emo>-ratings-0to1.train.txt  <emo>-ratings-0to1.dev.gold.txt
wassa          all four emotions (3,613)               all four (347)
============== ======================================= ====================================================

ARC has no train file offline, so its (small) Dev set is the train split and its Test set the eval split; the hub
fallback uses the same files (validation -> train, test -> eval) so results do not depend on where the data
came from. Seeded 80/20 splits are deterministic (``random.Random(seed)`` over the row indices; same seed, same
split), disjoint, and keep the file order inside each part. Fixed splits ignore ``seed``.

Label words (what the generator writes after a single space): SST-2 ``negative``/``positive``, BoolQ
``no``/``yes``, ARC ``A``-``E`` (the few numeric choice labels 1-5 are mapped to A-E), PIQA ``A``/``B``.
Regression ranges: STS-B 0-5, SICK relatedness 1-5, WASSA intensity 0-1.

Any other name is a data file (``.csv``, ``.tsv`` or ``.jsonl``); see :func:`load_task`.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import random
import re
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from forethought.core.env import data_root, hub_dataset_unavailable_reason, load_hub_dataset
from forethought.core.errors import ForethoughtError, first_line

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SPLITS = ("train", "eval")
TaskType = Literal["classification", "regression"]
FILE_EXTENSIONS = (".csv", ".tsv", ".jsonl")
DEFAULT_EVAL_FRACTION = 0.2
WASSA_EMOTIONS = ("anger", "fear", "joy", "sadness")
_LETTERS = "ABCDEFGHIJ"

# csv fields can be long (passages); the default limit of 128 KiB is enough for our data, but a generic file
# may hold longer texts.
csv.field_size_limit(1 << 30)


@dataclass
class Example:
    """One example: its text fields (filled into the task template), its target and a stable id.

    ``target`` is the label word (a string in ``TaskSpec.labels``) for classification, a float for regression.
    """

    fields: dict[str, str]
    target: str | float
    id: str


@dataclass
class TaskSpec:
    """What a task looks like to a generator.

    - ``labels``: for classification, the label *words* the generator writes (index = class id); empty for
      regression.
    - ``template``: a Python format string over the example fields (``str.format`` with field names, e.g.
      ``"Review: {sentence}\\nSentiment:"``). It ends right before the answer; the answer is generated after a
      single space (``prompt + " " + format_target(...)``).
    - ``value_range``: for regression, the (low, high) range answers are clipped to.
    - ``long_field``: the field shortened when a prompt exceeds its token budget (see :func:`render_prompt`).
    - ``truncate_side``: which end of ``long_field`` is cut: ``right`` (default) keeps its beginning, ``left``
      keeps its end.
    """

    name: str
    task_type: TaskType
    labels: list[str]
    template: str
    value_range: tuple[float, float] | None = None
    long_field: str | None = None
    truncate_side: Literal["left", "right"] = "right"

    def __post_init__(self) -> None:
        if self.task_type not in ("classification", "regression"):
            raise ForethoughtError(
                f"task '{self.name}': task_type must be 'classification' or 'regression', got '{self.task_type}'"
            )
        if self.truncate_side not in ("left", "right"):
            raise ForethoughtError(f"task '{self.name}': truncate_side must be 'left' or 'right'")
        if self.task_type == "classification" and len(set(self.labels)) != len(self.labels):
            raise ForethoughtError(f"task '{self.name}': duplicate label words in {self.labels}")
        if self.value_range is not None:
            low, high = (float(v) for v in self.value_range)
            if not (math.isfinite(low) and math.isfinite(high) and low <= high):
                raise ForethoughtError(f"task '{self.name}': value_range must be finite (low, high) with low <= high")
            self.value_range = (low, high)


# ----------------------------------------------------------------------------------------------------------
# Public entry point
# ----------------------------------------------------------------------------------------------------------


def known_tasks() -> tuple[str, ...]:
    """The built-in task names."""
    return tuple(_BUILTINS)


def load_task(
    name: str, split: Literal["train", "eval"], seed: int = 0, **generic_options: Any
) -> tuple[TaskSpec, list[Example]]:
    """Load one split of a task: a built-in name (see the module docstring) or a data file.

    Built-in tasks accept one option, ``template=...``, to replace the default prompt template.

    Data files (``.csv``/``.tsv``/``.jsonl``): ``.csv`` is read as RFC-4180 CSV (quoted fields may hold commas
    and newlines), ``.tsv`` as tab-separated text with no quoting (as the GLUE/SST files are), both with a
    header row; ``.jsonl`` holds one JSON object per line (blank lines skipped). Options:

    - ``target_field`` (required): the column holding the target.
    - ``text_fields``: the columns shown to the model (default: every column except the target and id).
    - ``task_type``: ``"classification"`` (default) or ``"regression"``.
    - ``template``: a format string over the text fields (default: one ``"{field}: {value}"`` line per field,
      then ``"\\nAnswer:"``).
    - ``eval_path``: a second file for the eval split; without it the file is split by ``eval_fraction``
      (default 0.2) with ``seed``, deterministically and disjointly.
    - ``labels``: the label words in class order (default: the sorted distinct targets of the train part).
    - ``value_range``: regression clip range (default: min and max of the train targets).
    - ``long_field`` / ``truncate_side``: see :class:`TaskSpec`. ``id_field``: a column with example ids
      (default: ``<file stem>-<line>``). ``name``: the task name (default: the file stem).

    Loading the eval split checks its labels against the train split's and raises, listing any label the
    train split never has. Every problem a user can fix raises :class:`ForethoughtError` with one line that
    names the file, the line and the field.
    """
    if split not in SPLITS:
        raise ForethoughtError(f"unknown split '{split}'; expected one of {', '.join(SPLITS)}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ForethoughtError(f"seed must be an integer, got {seed!r}")
    key = str(name).strip()
    builtin_key = key.lower().replace("_", "-")
    if builtin_key in _BUILTINS:
        return _load_builtin(builtin_key, split, seed, generic_options)
    path = Path(key).expanduser()
    suffix = path.suffix.lower()
    if suffix in FILE_EXTENSIONS:
        if not path.is_file():
            raise ForethoughtError(f"task file not found: {path}")
        return _load_file_task(path, split, seed, generic_options)
    if suffix or path.is_file():
        raise ForethoughtError(
            f"task file {path}: unsupported extension '{suffix or '(none)'}'; use one of {', '.join(FILE_EXTENSIONS)}"
        )
    raise ForethoughtError(
        f"unknown task '{key}'; known tasks: {', '.join(_BUILTINS)}; or give a path to a "
        f"{'/'.join(FILE_EXTENSIONS)} file"
    )


# ----------------------------------------------------------------------------------------------------------
# Prompts and answers
# ----------------------------------------------------------------------------------------------------------


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


def format_target(spec: TaskSpec, value: str | float, decimals: int = 2) -> str:
    """The answer text the generator writes: the label word, or the number with ``decimals`` fixed decimals,
    clipped to ``spec.value_range`` (``3.14159 -> "3.14"``; ``-0.00`` is written ``0.00``)."""
    if spec.task_type == "classification":
        if isinstance(value, str) and value in spec.labels:
            return value
        raise ForethoughtError(f"task '{spec.name}': target {value!r} is not one of the labels {spec.labels}")
    if isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0:
        raise ForethoughtError(f"decimals must be a non-negative integer, got {decimals!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ForethoughtError(f"task '{spec.name}': regression target {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ForethoughtError(f"task '{spec.name}': regression target {value!r} is not finite")
    number = _clip(spec, number)
    text = f"{number:.{decimals}f}"
    if text.startswith("-") and float(text) == 0.0:
        text = text[1:]
    return text


_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_OPENERS = "([{\"'`*"


def parse_target(spec: TaskSpec, text: str) -> str | float | None:
    """Read a generated answer back: a label word, a float, or None when it cannot be parsed.

    Classification: the text (leading space, brackets and quotes ignored) must start with a label word,
    matched case-insensitively and followed by a non-alphanumeric character or the end (``"Yes."`` -> ``yes``,
    ``"(B)"`` -> ``B``, ``"Answer"`` -> None for labels A-D); longer labels are tried first. Regression: a
    number at the start of the text, clipped to ``spec.value_range``; None if there is none or it is not finite.
    """
    stripped = text.lstrip().lstrip(_OPENERS).lstrip()
    if spec.task_type == "classification":
        folded = stripped.casefold()
        for label in sorted(spec.labels, key=len, reverse=True):
            word = label.casefold()
            if folded.startswith(word) and (len(folded) == len(word) or not folded[len(word)].isalnum()):
                return label
        return None
    match = _NUMBER.match(stripped)
    if match is None:
        return None
    number = float(match.group())
    if not math.isfinite(number):
        return None
    return _clip(spec, number)


def _clip(spec: TaskSpec, number: float) -> float:
    if spec.value_range is None:
        return number
    low, high = spec.value_range
    return min(max(number, low), high)


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


# ----------------------------------------------------------------------------------------------------------
# Reading files
# ----------------------------------------------------------------------------------------------------------


def _open_text(path: Path) -> Any:
    try:
        return path.open(encoding="utf-8-sig", newline="")
    except OSError as e:
        raise ForethoughtError(f"cannot read {path}: {e.strerror or e}") from e


def _rows(path: Path, delimiter: str, quoting: int) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) for each non-blank row of a delimited file; the line number is where the row starts."""
    with _open_text(path) as fh:
        reader = csv.reader(fh, delimiter=delimiter, quoting=quoting)
        start = 1
        try:
            for cells in reader:
                line = start
                start = reader.line_num + 1
                if not cells or (len(cells) == 1 and not cells[0].strip()):
                    continue
                yield line, cells
        except csv.Error as e:
            raise ForethoughtError(f"{path} line {reader.line_num}: cannot parse ({e})") from None
        except UnicodeDecodeError as e:
            raise ForethoughtError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def _tsv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    return _rows(path, "\t", csv.QUOTE_NONE)


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with _open_text(path) as fh:
        try:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ForethoughtError(f"{path} line {number}: invalid JSON ({e.msg})") from None
                if not isinstance(record, dict):
                    raise ForethoughtError(f"{path} line {number}: expected a JSON object, got {type(record).__name__}")
                yield number, record
        except UnicodeDecodeError as e:
            raise ForethoughtError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def _header_records(path: Path, delimiter: str, quoting: int) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Records of a delimited file with a header row. Short rows miss their last fields; extra non-empty cells
    (a stray delimiter inside a TSV text, say) are an error, since the fields after it would be shifted."""
    rows = _rows(path, delimiter, quoting)
    first = next(rows, None)
    if first is None:
        raise ForethoughtError(f"{path} is empty: expected a header row and examples")
    header = [h.strip() for h in first[1]]
    records: list[tuple[int, dict[str, str]]] = []
    for line, cells in rows:
        if len(cells) > len(header) and any(c.strip() for c in cells[len(header) :]):
            raise ForethoughtError(
                f"{path} line {line}: {len(cells)} cells but the header has {len(header)} "
                f"({', '.join(header)}); check for stray delimiters"
            )
        records.append((line, {h: c for h, c in zip(header, cells, strict=False) if h}))
    return header, records


def _need(record: dict[str, Any], key: str, where: str) -> Any:
    """record[key], or a one-line error naming the field, the place and the fields present."""
    value = record.get(key)
    if value is None:
        present = ", ".join(str(k) for k in record) or "(none)"
        raise ForethoughtError(f"{where}: missing field '{key}' (fields present: {present})")
    return value


def _text(value: Any) -> str:
    """A field value as text: strings stripped, booleans lower-case, numbers as written, others as JSON."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def _number(value: Any, where: str, field_name: str) -> float:
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number):
        raise ForethoughtError(f"{where}: regression target '{field_name}' is not a number: {value!r}")
    return number


def _seeded_split(items: list[Any], split: str, seed: int, eval_fraction: float, what: str) -> list[Any]:
    """A deterministic, disjoint train/eval split: random.Random(seed) shuffles the indices, the first
    round(n * eval_fraction) of them (at least 1) are eval, the rest train; each part keeps the file order."""
    n = len(items)
    if n < 2:
        raise ForethoughtError(f"{what} has {n} example(s); a train/eval split needs at least 2")
    n_eval = min(n - 1, max(1, round(n * eval_fraction)))
    order = list(range(n))
    random.Random(seed).shuffle(order)
    chosen = set(order[:n_eval]) if split == "eval" else set(order[n_eval:])
    return [items[i] for i in sorted(chosen)]


# ----------------------------------------------------------------------------------------------------------
# Built-in tasks
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Builtin:
    spec: TaskSpec
    files: tuple[str, ...]  # what must exist under the data root
    read_local: Callable[[Path, str, int], list[Example]]
    hub_id: str | None = None
    hub_config: str | None = None
    read_hub: Callable[[Any, str, int], list[Example]] | None = None


def _load_builtin(name: str, split: str, seed: int, options: dict[str, Any]) -> tuple[TaskSpec, list[Example]]:
    builtin = _BUILTINS[name]
    unknown = sorted(set(options) - {"template"})
    if unknown:
        raise ForethoughtError(
            f"task '{name}': option(s) {', '.join(unknown)} apply only to data files; built-in tasks accept template"
        )
    spec = dataclasses.replace(builtin.spec, labels=list(builtin.spec.labels))
    if options.get("template") is not None:
        spec.template = str(options["template"])
    root = data_root()
    if root is not None and all((root / f).is_file() for f in builtin.files):
        examples = builtin.read_local(root, split, seed)
    else:
        examples = _read_from_hub(name, builtin, root, split, seed)
    if not examples:
        raise ForethoughtError(f"task '{name}' has no examples in its {split} split")
    _check_template(spec, examples[0])
    if spec.task_type == "classification":
        _check_labels(spec, examples, f"task '{name}' {split} split")
    return spec, examples


def _read_from_hub(name: str, builtin: _Builtin, root: Path | None, split: str, seed: int) -> list[Example]:
    if root is None:
        tried = "the data root (FORETHOUGHT_DATA is not set)"
    else:
        missing = [f for f in builtin.files if not (root / f).is_file()]
        tried = f"{root} (missing {', '.join(missing)})"
    layout = " and ".join(builtin.files)
    if builtin.hub_id is None or builtin.read_hub is None:
        raise ForethoughtError(
            f"task '{name}' not found: looked in {tried}; there is no reliable Hugging Face hub copy. "
            f"Set FORETHOUGHT_DATA to a data folder holding {layout}"
        )
    hub = builtin.hub_id + (f" (config {builtin.hub_config})" if builtin.hub_config else "")

    def not_found(reason: str) -> ForethoughtError:
        return ForethoughtError(
            f"task '{name}' not found: looked in {tried}, and on the Hugging Face hub as '{hub}' ({reason}). "
            f"Set FORETHOUGHT_DATA to a data folder holding {layout}"
        )

    reason = hub_dataset_unavailable_reason()
    if reason is not None:
        raise not_found(reason)
    try:
        loaded = _hub_dataset(builtin.hub_id, builtin.hub_config)
    except Exception as e:  # datasets raises many types (network, missing config, scripts, ...)
        raise not_found(f"loading failed: {first_line(e)}") from e
    return builtin.read_hub(loaded, split, seed)


@functools.lru_cache(maxsize=8)
def _hub_dataset(hub_id: str, config: str | None) -> Any:
    return load_hub_dataset(hub_id, config)  # cached: a task's train and eval splits come from one download


def _hub_split(loaded: Any, hub_id: str, split_name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if split_name not in loaded:
        raise ForethoughtError(f"hub dataset '{hub_id}' has no '{split_name}' split (splits: {', '.join(loaded)})")
    for i, record in enumerate(loaded[split_name]):
        yield f"hub dataset {hub_id} {split_name} row {i}", dict(record)


def _check_template(spec: TaskSpec, example: Example) -> None:
    """Raise when the template names a field the examples do not have, or is not a valid format string."""
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(spec.template) if f is not None]
    except ValueError as e:
        raise ForethoughtError(f"task '{spec.name}': bad template {spec.template!r}: {e}") from None
    for name in names:
        base = re.split(r"[.\[]", name, maxsplit=1)[0]
        if base == "" or base.isdigit():
            raise ForethoughtError(
                f"task '{spec.name}': template {spec.template!r} has a positional field; name the fields"
            )
        if base not in example.fields:
            raise ForethoughtError(
                f"task '{spec.name}': template refers to field '{base}', which the examples do not have "
                f"(fields: {', '.join(example.fields)})"
            )


def _check_labels(spec: TaskSpec, examples: list[Example], what: str) -> None:
    unseen = sorted({str(ex.target) for ex in examples} - set(spec.labels))
    if unseen:
        raise ForethoughtError(f"{what} has label(s) {', '.join(unseen)} outside the task's labels {spec.labels}")


# --- SST-2 ------------------------------------------------------------------------------------------------

_SST2_LABELS = {"0": "negative", "1": "positive"}


def _sst2_example(record: dict[str, Any], where: str, example_id: str) -> Example:
    sentence = _text(_need(record, "sentence", where))
    label = _text(_need(record, "label", where))
    if label not in _SST2_LABELS:
        raise ForethoughtError(f"{where}: label must be 0 or 1, got {label!r}")
    return Example({"sentence": sentence}, _SST2_LABELS[label], example_id)


def _sst2_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "sst2" / ("train.tsv" if split == "train" else "dev.tsv")
    _, records = _header_records(path, "\t", csv.QUOTE_NONE)
    return [_sst2_example(r, f"{path} line {line}", f"sst2-{split}-{line}") for line, r in records]


def _sst2_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    hub_split = "train" if split == "train" else "validation"
    return [
        _sst2_example(r, where, f"sst2-{split}-{r.get('idx', i)}")
        for i, (where, r) in enumerate(_hub_split(loaded, "stanfordnlp/sst2", hub_split))
    ]


# --- BoolQ ------------------------------------------------------------------------------------------------


def _boolq_example(record: dict[str, Any], label_key: str, where: str, example_id: str) -> Example:
    question = _text(_need(record, "question", where)).rstrip(" ?") + "?"
    passage = _text(_need(record, "passage", where))
    label = _need(record, label_key, where)
    word = label.strip().lower() if isinstance(label, str) else label
    if word in (True, "true"):
        target = "yes"
    elif word in (False, "false"):
        target = "no"
    else:
        raise ForethoughtError(f"{where}: '{label_key}' must be true or false, got {label!r}")
    return Example({"passage": passage, "question": question}, target, example_id)


def _boolq_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "boolq" / "val.jsonl"
    examples = [
        _boolq_example(r, "label", f"{path} line {line}", f"boolq-{r.get('idx', line)}")
        for line, r in _jsonl_rows(path)
    ]
    return _seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, str(path))


def _boolq_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    examples = [
        _boolq_example(r, "answer", where, f"boolq-{i}")
        for i, (where, r) in enumerate(_hub_split(loaded, "google/boolq", "validation"))
    ]
    return _seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, "hub dataset google/boolq validation")


# --- ARC --------------------------------------------------------------------------------------------------


def _letter(label: Any, where: str) -> str:
    """An ARC choice label as a letter: A-E stay, numeric 1-5 become A-E."""
    text = _text(label).upper()
    if text.isdigit() and 1 <= int(text) <= len(_LETTERS):
        return _LETTERS[int(text) - 1]
    if len(text) == 1 and text in _LETTERS:
        return text
    raise ForethoughtError(f"{where}: unexpected choice label {label!r}")


def _arc_example(stem: Any, labels: list[Any], texts: list[Any], answer: Any, where: str, ex_id: str) -> Example:
    letters = [_letter(label, where) for label in labels]
    if not letters or len(letters) != len(texts):
        raise ForethoughtError(f"{where}: expected matching lists of choice labels and texts")
    key = _letter(answer, where)
    if key not in letters:
        raise ForethoughtError(f"{where}: answerKey {answer!r} is not one of the choices {letters}")
    choices = "\n".join(f"{letter}. {_text(text)}" for letter, text in zip(letters, texts, strict=True))
    return Example({"question": _text(stem), "choices": choices}, key, ex_id)


def _arc_local(level: str, root: Path, split: str, seed: int) -> list[Example]:
    path = root / "arc" / f"ARC-{level}-{'Dev' if split == 'train' else 'Test'}.jsonl"
    examples = []
    for line, record in _jsonl_rows(path):
        where = f"{path} line {line}"
        question = _need(record, "question", where)
        if not isinstance(question, dict):
            raise ForethoughtError(f"{where}: 'question' must be an object with 'stem' and 'choices'")
        choices = _need(question, "choices", f"{where} question")
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise ForethoughtError(f"{where}: 'question.choices' must be a list of {{text, label}} objects")
        labels = [_need(c, "label", f"{where} choice") for c in choices]
        texts = [_need(c, "text", f"{where} choice") for c in choices]
        stem = _need(question, "stem", f"{where} question")
        answer = _need(record, "answerKey", where)
        examples.append(_arc_example(stem, labels, texts, answer, where, str(record.get("id", line))))
    return examples


def _arc_hub(level: str, loaded: Any, split: str, seed: int) -> list[Example]:
    hub_split = "validation" if split == "train" else "test"
    examples = []
    for i, (where, r) in enumerate(_hub_split(loaded, "allenai/ai2_arc", hub_split)):
        choices = _need(r, "choices", where)
        if not isinstance(choices, dict):
            raise ForethoughtError(f"{where}: 'choices' must be an object with 'text' and 'label' lists")
        labels = list(_need(choices, "label", f"{where} choices"))
        texts = list(_need(choices, "text", f"{where} choices"))
        stem, answer = _need(r, "question", where), _need(r, "answerKey", where)
        examples.append(_arc_example(stem, labels, texts, answer, where, str(r.get("id", f"arc-{level}-{i}"))))
    return examples


# --- PIQA -------------------------------------------------------------------------------------------------


def _piqa_example(record: dict[str, Any], label: Any, where: str, example_id: str) -> Example:
    fields = {k: _text(_need(record, k, where)) for k in ("goal", "sol1", "sol2")}
    text = _text(label)
    if text not in ("0", "1"):
        raise ForethoughtError(f"{where}: label must be 0 or 1, got {label!r}")
    return Example(fields, "AB"[int(text)], example_id)


def _piqa_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "piqa" / "valid.jsonl"
    labels_path = root / "piqa" / "valid-labels.lst"
    records = list(_jsonl_rows(path))
    with _open_text(labels_path) as fh:
        labels = [line.strip() for line in fh if line.strip()]
    if len(labels) != len(records):
        raise ForethoughtError(
            f"{labels_path} has {len(labels)} labels but {path} has {len(records)} examples; they must be line-aligned"
        )
    examples = [
        _piqa_example(r, label, f"{path} line {line} (label line {i + 1})", f"piqa-{i}")
        for i, ((line, r), label) in enumerate(zip(records, labels, strict=True))
    ]
    return _seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, str(path))


def _piqa_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    examples = [
        _piqa_example(r, _need(r, "label", where), where, f"piqa-{i}")
        for i, (where, r) in enumerate(_hub_split(loaded, "ybisk/piqa", "validation"))
    ]
    return _seeded_split(examples, split, seed, DEFAULT_EVAL_FRACTION, "hub dataset ybisk/piqa validation")


# --- STS-B ------------------------------------------------------------------------------------------------


def _stsb_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "stsb" / ("sts-train.csv" if split == "train" else "sts-dev.csv")
    examples = []
    for line, cells in _tsv_rows(path):
        where = f"{path} line {line}"
        if len(cells) < 7:
            raise ForethoughtError(
                f"{where}: {len(cells)} tab-separated columns, expected at least 7 "
                "(genre, filename, year, id, score, sentence1, sentence2)"
            )
        score = _number(cells[4], where, "score (column 5)")
        fields = {"sentence1": cells[5].strip(), "sentence2": cells[6].strip()}
        examples.append(Example(fields, score, f"stsb-{split}-{line}"))
    return examples


def _stsb_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    hub_split = "train" if split == "train" else "validation"
    examples = []
    for i, (where, r) in enumerate(_hub_split(loaded, "sentence-transformers/stsb", hub_split)):
        fields = {k: _text(_need(r, k, where)) for k in ("sentence1", "sentence2")}
        score = 5.0 * _number(_need(r, "score", where), where, "score")  # this copy divides scores by 5
        examples.append(Example(fields, score, f"stsb-{split}-{i}"))
    return examples


# --- SICK -------------------------------------------------------------------------------------------------


def _sick_example(record: dict[str, Any], where: str, example_id: str) -> Example:
    fields = {
        "sentence1": _text(_need(record, "sentence_A", where)),
        "sentence2": _text(_need(record, "sentence_B", where)),
    }
    score = _number(_need(record, "relatedness_score", where), where, "relatedness_score")
    return Example(fields, score, example_id)


def _sick_local(root: Path, split: str, seed: int) -> list[Example]:
    path = root / "sick" / "SICK.txt"
    _, records = _header_records(path, "\t", csv.QUOTE_NONE)
    wanted = "TRAIN" if split == "train" else "TEST"
    examples = []
    for line, record in records:
        where = f"{path} line {line}"
        if _text(_need(record, "SemEval_set", where)).upper() == wanted:
            examples.append(_sick_example(record, where, f"sick-{record.get('pair_ID', line)}"))
    if not examples:
        raise ForethoughtError(f"{path} has no rows with SemEval_set {wanted} (for the {split} split)")
    return examples


def _sick_hub(loaded: Any, split: str, seed: int) -> list[Example]:
    hub_split = "train" if split == "train" else "test"
    return [
        _sick_example(r, where, f"sick-{r.get('pair_ID', r.get('id', i))}")
        for i, (where, r) in enumerate(_hub_split(loaded, "RobZamp/sick", hub_split))
    ]


# --- WASSA-2017 -------------------------------------------------------------------------------------------


def _wassa_files(emotions: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(
        f"wassa2017/{emo}-ratings-0to1.{kind}.txt" for emo in emotions for kind in ("train", "dev.gold")
    )


def _wassa_local(emotions: tuple[str, ...], root: Path, split: str, seed: int) -> list[Example]:
    kind = "train" if split == "train" else "dev.gold"
    examples = []
    for emotion in emotions:
        path = root / "wassa2017" / f"{emotion}-ratings-0to1.{kind}.txt"
        for line, cells in _tsv_rows(path):
            where = f"{path} line {line}"
            if len(cells) < 4:
                raise ForethoughtError(
                    f"{where}: {len(cells)} tab-separated columns, expected 4 (id, tweet, emotion, intensity)"
                )
            intensity = _number(cells[3], where, "intensity (column 4)")
            fields = {"tweet": cells[1].strip(), "emotion": cells[2].strip() or emotion}
            examples.append(Example(fields, intensity, f"wassa-{cells[0].strip() or f'{emotion}-{line}'}"))
    return examples


# --- The registry -----------------------------------------------------------------------------------------

_MC_TEMPLATE = "Question: {question}\n{choices}\nAnswer:"
_WASSA_TEMPLATE = "Tweet: {tweet}\nEmotion: {emotion}\nIntensity (0 to 1):"


def _wassa_builtin(name: str, emotions: tuple[str, ...]) -> _Builtin:
    spec = TaskSpec(name, "regression", [], _WASSA_TEMPLATE, value_range=(0.0, 1.0), long_field="tweet")
    return _Builtin(spec, _wassa_files(emotions), functools.partial(_wassa_local, emotions))


_BUILTINS: dict[str, _Builtin] = {
    "sst2": _Builtin(
        TaskSpec("sst2", "classification", ["negative", "positive"], "Review: {sentence}\nSentiment:",
                 long_field="sentence"),
        ("sst2/train.tsv", "sst2/dev.tsv"), _sst2_local, "stanfordnlp/sst2", None, _sst2_hub,
    ),
    "boolq": _Builtin(
        TaskSpec("boolq", "classification", ["no", "yes"], "Passage: {passage}\nQuestion: {question}\nAnswer:",
                 long_field="passage"),
        ("boolq/val.jsonl",), _boolq_local, "google/boolq", None, _boolq_hub,
    ),
    "arc-easy": _Builtin(
        TaskSpec("arc-easy", "classification", list("ABCDE"), _MC_TEMPLATE, long_field="question"),
        ("arc/ARC-Easy-Dev.jsonl", "arc/ARC-Easy-Test.jsonl"), functools.partial(_arc_local, "Easy"),
        "allenai/ai2_arc", "ARC-Easy", functools.partial(_arc_hub, "Easy"),
    ),
    "arc-challenge": _Builtin(
        TaskSpec("arc-challenge", "classification", list("ABCDE"), _MC_TEMPLATE, long_field="question"),
        ("arc/ARC-Challenge-Dev.jsonl", "arc/ARC-Challenge-Test.jsonl"), functools.partial(_arc_local, "Challenge"),
        "allenai/ai2_arc", "ARC-Challenge", functools.partial(_arc_hub, "Challenge"),
    ),
    "piqa": _Builtin(
        TaskSpec("piqa", "classification", ["A", "B"], "Goal: {goal}\nA. {sol1}\nB. {sol2}\nAnswer:",
                 long_field="goal"),
        ("piqa/valid.jsonl", "piqa/valid-labels.lst"), _piqa_local, "ybisk/piqa", None, _piqa_hub,
    ),
    "stsb": _Builtin(
        TaskSpec("stsb", "regression", [], "Sentence 1: {sentence1}\nSentence 2: {sentence2}\nSimilarity (0 to 5):",
                 value_range=(0.0, 5.0)),
        ("stsb/sts-train.csv", "stsb/sts-dev.csv"), _stsb_local, "sentence-transformers/stsb", None, _stsb_hub,
    ),
    "sick": _Builtin(
        TaskSpec("sick", "regression", [],
                 "Sentence 1: {sentence1}\nSentence 2: {sentence2}\nRelatedness (1 to 5):", value_range=(1.0, 5.0)),
        ("sick/SICK.txt",), _sick_local, "RobZamp/sick", None, _sick_hub,
    ),
    "wassa": _wassa_builtin("wassa", WASSA_EMOTIONS),
    **{f"wassa-{emo}": _wassa_builtin(f"wassa-{emo}", (emo,)) for emo in WASSA_EMOTIONS},
}  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Data-file tasks
# ----------------------------------------------------------------------------------------------------------

_FILE_OPTIONS = (
    "target_field", "text_fields", "task_type", "template", "eval_path", "eval_fraction", "labels",
    "value_range", "long_field", "truncate_side", "id_field", "name",
)  # fmt: skip
_UNSAFE_FIELD = re.compile(r"[.\[\]{}:!]")


def _read_records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        records = list(_jsonl_rows(path))
    elif suffix in (".csv", ".tsv"):
        delimiter, quoting = (",", csv.QUOTE_MINIMAL) if suffix == ".csv" else ("\t", csv.QUOTE_NONE)
        _, records = _header_records(path, delimiter, quoting)
    else:
        raise ForethoughtError(
            f"task file {path}: unsupported extension '{suffix}'; use one of {', '.join(FILE_EXTENSIONS)}"
        )
    if not records:
        raise ForethoughtError(f"{path} has no examples")
    return records


def _file_examples(path: Path, opts: dict[str, Any]) -> list[Example]:
    records = _read_records(path)
    target_field = opts.get("target_field")
    present = list(records[0][1])
    if not target_field:
        raise ForethoughtError(
            f"task file {path}: give target_field=... (fields in the first row: {', '.join(present)})"
        )
    id_field = opts.get("id_field")
    text_fields = opts.get("text_fields")
    if text_fields is None:
        text_fields = [f for f in present if f not in (target_field, id_field)]
    elif isinstance(text_fields, str):
        text_fields = [text_fields]
    text_fields = [str(f) for f in text_fields]
    if not text_fields:
        raise ForethoughtError(
            f"task file {path}: no text fields (give text_fields=[...]; fields: {', '.join(present)})"
        )
    regression = opts.get("task_type", "classification") == "regression"
    stem = path.stem
    examples = []
    for line, record in records:
        where = f"{path} line {line}"
        fields = {f: _text(_need(record, f, where)) for f in text_fields}
        raw = _need(record, target_field, where)
        if regression:
            target: str | float = _number(raw, where, target_field)
        else:
            target = _text(raw)
            if not target:
                raise ForethoughtError(f"{where}: empty target in field '{target_field}'")
        example_id = _text(_need(record, id_field, where)) if id_field else f"{stem}-{line}"
        examples.append(Example(fields, target, example_id))
    return examples


def _load_file_task(path: Path, split: str, seed: int, opts: dict[str, Any]) -> tuple[TaskSpec, list[Example]]:
    unknown = sorted(set(opts) - set(_FILE_OPTIONS))
    if unknown:
        raise ForethoughtError(
            f"task file {path}: unknown option(s) {', '.join(unknown)}; accepted: {', '.join(_FILE_OPTIONS)}"
        )
    task_type = opts.get("task_type", "classification")
    if task_type not in ("classification", "regression"):
        raise ForethoughtError(
            f"task file {path}: task_type must be 'classification' or 'regression', got {task_type!r}"
        )
    eval_path = opts.get("eval_path")
    eval_fraction = opts.get("eval_fraction", DEFAULT_EVAL_FRACTION)
    if not isinstance(eval_fraction, (int, float)) or isinstance(eval_fraction, bool) or not 0 < eval_fraction < 1:
        raise ForethoughtError(f"task file {path}: eval_fraction must be between 0 and 1, got {eval_fraction!r}")

    examples = _file_examples(path, opts)
    if eval_path is None:
        train = _seeded_split(examples, "train", seed, float(eval_fraction), str(path))
        evals = _seeded_split(examples, "eval", seed, float(eval_fraction), str(path)) if split == "eval" else []
    else:
        eval_file = Path(eval_path).expanduser()
        if eval_file.suffix.lower() not in FILE_EXTENSIONS:
            raise ForethoughtError(
                f"eval file {eval_file}: unsupported extension '{eval_file.suffix or '(none)'}'; "
                f"use one of {', '.join(FILE_EXTENSIONS)}"
            )
        if not eval_file.is_file():
            raise ForethoughtError(f"eval file not found: {eval_file}")
        train = examples
        evals = _file_examples(eval_file, opts) if split == "eval" else []
    where_eval = str(eval_path) if eval_path is not None else f"the eval part of {path}"

    name = str(opts.get("name") or path.stem)
    text_fields = list(train[0].fields)
    labels: list[str] = []
    value_range: tuple[float, float] | None = None
    if task_type == "classification":
        seen = sorted({str(ex.target) for ex in train})
        labels = [str(x) for x in opts["labels"]] if opts.get("labels") is not None else seen
        if len(set(labels)) < 2:
            raise ForethoughtError(
                f"task file {path}: classification needs at least two labels; the train split has only {seen}"
            )
        stray = sorted(set(seen) - set(labels))
        if stray:
            raise ForethoughtError(
                f"task file {path}: train split has label(s) {', '.join(stray)} not in labels={labels}"
            )
        if split == "eval":
            unseen = sorted({str(ex.target) for ex in evals} - set(seen))
            if unseen:
                raise ForethoughtError(
                    f"{where_eval}: eval label(s) {', '.join(repr(u) for u in unseen)} never occur in the train split "
                    f"(train labels: {', '.join(seen)})"
                )
    else:
        given = opts.get("value_range")
        if given is not None:
            if not isinstance(given, (list, tuple)) or len(given) != 2:
                raise ForethoughtError(f"task file {path}: value_range must be (low, high), got {given!r}")
            value_range = (float(given[0]), float(given[1]))
        else:
            targets = [float(ex.target) for ex in train]
            value_range = (min(targets), max(targets))

    template = opts.get("template")
    if template is None:
        unsafe = [f for f in text_fields if _UNSAFE_FIELD.search(f)]
        if unsafe:
            raise ForethoughtError(
                f"task file {path}: field name(s) {', '.join(unsafe)} cannot go in a format string; give template=..."
            )
        template = "\n".join(f"{f}: {{{f}}}" for f in text_fields) + "\nAnswer:"
    long_field = opts.get("long_field")
    if long_field is not None and long_field not in text_fields:
        raise ForethoughtError(
            f"task file {path}: long_field '{long_field}' is not a text field ({', '.join(text_fields)})"
        )
    spec = TaskSpec(
        name,
        task_type,
        labels,
        str(template),
        value_range=value_range,
        long_field=long_field,
        truncate_side=opts.get("truncate_side", "right"),
    )
    _check_template(spec, train[0])
    return spec, (train if split == "train" else evals)


__all__ = [
    "Example",
    "TaskSpec",
    "known_tasks",
    "load_task",
    "render_prompt",
    "format_target",
    "parse_target",
    "SPLITS",
    "WASSA_EMOTIONS",
]


def template_fields(spec: TaskSpec) -> list[str]:
    """The example fields a task's template reads."""
    names = [f for _, f, _, _ in string.Formatter().parse(spec.template) if f]
    return list(dict.fromkeys(re.split(r"[.\[]", n, maxsplit=1)[0] for n in names))


def read_inputs(path: str | Path, spec: TaskSpec, id_field: str | None = None) -> list[Example]:
    """New inputs to predict: a ``.csv``/``.tsv``/``.jsonl`` file holding (at least) the fields the task's template
    reads. Targets are not needed (``Example.target`` is None). Missing fields raise with the line."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ForethoughtError(f"input file not found: {path}")
    needed = template_fields(spec)
    out = []
    for line, record in _read_records(path):
        where = f"{path} line {line}"
        fields = {f: _text(_need(record, f, where)) for f in needed}
        example_id = _text(_need(record, id_field, where)) if id_field else f"{path.stem}-{line}"
        out.append(Example(fields, None, example_id))  # type: ignore[arg-type]
    return out
