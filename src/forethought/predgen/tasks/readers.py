"""Reading delimited and JSONL files into records, and field values into text or numbers, with one-line errors
that name the file, the line and the field.

``.csv`` is RFC-4180 CSV (quoted fields may hold commas and newlines), ``.tsv`` tab-separated text with no
quoting (as the GLUE/SST files are), both with a header row; ``.jsonl`` holds one JSON object per line (blank
lines skipped). A hub dataset's split is read as records too (:func:`hub_split`).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from forethought.core.errors import ForethoughtError

FILE_EXTENSIONS = (".csv", ".tsv", ".jsonl")
Record = tuple[int, dict[str, Any]]  # (line number where the row starts, field -> value)

# csv fields can be long (passages); the default limit of 128 KiB is enough for our data, but a generic file
# may hold longer texts.
csv.field_size_limit(1 << 30)


def open_text(path: Path) -> Any:
    try:
        return path.open(encoding="utf-8-sig", newline="")
    except OSError as e:
        raise ForethoughtError(f"cannot read {path}: {e.strerror or e}") from e


def rows(path: Path, delimiter: str, quoting: int) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) for each non-blank row of a delimited file; the line number is where the row starts."""
    with open_text(path) as fh:
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


def tsv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    return rows(path, "\t", csv.QUOTE_NONE)


def jsonl_rows(path: Path) -> Iterator[Record]:
    with open_text(path) as fh:
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


def header_records(path: Path, delimiter: str, quoting: int) -> tuple[list[str], list[Record]]:
    """Records of a delimited file with a header row. Short rows miss their last fields; extra non-empty cells
    (a stray delimiter inside a TSV text, say) are an error, since the fields after it would be shifted."""
    it = rows(path, delimiter, quoting)
    first = next(it, None)
    if first is None:
        raise ForethoughtError(f"{path} is empty: expected a header row and examples")
    header = [h.strip() for h in first[1]]
    records: list[Record] = []
    for line, cells in it:
        if len(cells) > len(header) and any(c.strip() for c in cells[len(header) :]):
            raise ForethoughtError(
                f"{path} line {line}: {len(cells)} cells but the header has {len(header)} "
                f"({', '.join(header)}); check for stray delimiters"
            )
        records.append((line, {h: c for h, c in zip(header, cells, strict=False) if h}))
    return header, records


def read_records(path: Path) -> tuple[list[str] | None, list[Record]]:
    """(header, records) of a data file; the header is None for JSONL (each object names its own fields)."""
    suffix = path.suffix.lower()
    header: list[str] | None = None
    if suffix == ".jsonl":
        records = list(jsonl_rows(path))
    elif suffix in (".csv", ".tsv"):
        delimiter, quoting = (",", csv.QUOTE_MINIMAL) if suffix == ".csv" else ("\t", csv.QUOTE_NONE)
        header, records = header_records(path, delimiter, quoting)
    else:
        raise ForethoughtError(
            f"task file {path}: unsupported extension '{suffix}'; use one of {', '.join(FILE_EXTENSIONS)}"
        )
    if not records:
        raise ForethoughtError(f"{path} has no examples")
    return header, records


def need(record: dict[str, Any], key: str, where: str) -> Any:
    """record[key], or a one-line error naming the field, the place and the fields present."""
    value = record.get(key)
    if value is None:
        present = ", ".join(str(k) for k in record) or "(none)"
        raise ForethoughtError(f"{where}: missing field '{key}' (fields present: {present})")
    return value


def as_text(value: Any) -> str:
    """A field value as text: strings stripped, booleans lower-case, numbers as written, others as JSON."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def as_number(value: Any, where: str, field_name: str) -> float:
    """A regression target as a finite float, or a one-line error naming the place and the field."""
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number):
        raise ForethoughtError(f"{where}: regression target '{field_name}' is not a number: {value!r}")
    return number


def hub_split(loaded: Any, hub_id: str, split_name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The records of split ``split_name`` of a loaded hub dataset, each with where it is (for errors)."""
    if split_name not in loaded:
        raise ForethoughtError(f"hub dataset '{hub_id}' has no '{split_name}' split (splits: {', '.join(loaded)})")
    for i, record in enumerate(loaded[split_name]):
        yield f"hub dataset {hub_id} {split_name} row {i}", dict(record)
