"""Atomic file writes: a killed process never leaves a half-written file behind (temp file + rename)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from forethought.core.errors import ForethoughtError, first_line


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def previous_results(run_dir: str | Path) -> dict[str, Any] | None:
    """A run folder's results.json as an earlier invocation wrote it, or None when missing or damaged (this
    invocation then rewrites it)."""
    try:
        return json.loads((Path(run_dir) / "results.json").read_text())
    except (OSError, ValueError):
        return None


def same_results(previous: dict[str, Any] | None, new: dict[str, Any], volatile: tuple[str, ...] = (),
                 folders: tuple[str, ...] = ()) -> bool:
    """Whether a rerun's results equal the ``previous`` ones but for the ``volatile`` keys (wall times) and how
    the ``folders`` keys spell a path (the same folder named relative or absolute). A rerun that trained nothing
    keeps the old results.json then: its bytes key evaluation caches."""
    if previous is None:
        return False
    new = json.loads(json.dumps(new, default=_json_default))  # as written: tuples become lists
    for k in folders:
        a, b = previous.get(k), new.get(k)
        if a != b and not (isinstance(a, str) and isinstance(b, str) and _same_folder(a, b)):
            return False
    skip = set(volatile) | set(folders)
    return {k: v for k, v in previous.items() if k not in skip} == {k: v for k, v in new.items() if k not in skip}


def _same_folder(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_json_object(path: str | Path, required: tuple[str, ...] = (), fix: str = "") -> dict[str, Any]:
    """A JSON file that must hold an object with the ``required`` keys. Unreadable, truncated, not an object or
    keys missing: one ForethoughtError naming the file (``fix``, when given, says how to get a good one)."""
    path = Path(path)
    tail = f"; {fix}" if fix else ""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ForethoughtError(f"{path} is unreadable or corrupt ({first_line(e)}){tail}") from None
    if not isinstance(data, dict):
        raise ForethoughtError(f"{path} is corrupt (not a JSON object){tail}")
    missing = [k for k in required if k not in data]
    if missing:
        raise ForethoughtError(f"{path} is corrupt or incomplete (missing {', '.join(missing)}){tail}")
    return data


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a JSON-lines log (metrics.jsonl, predictions.jsonl); [] when the file is missing. A line torn
    by a kill (not valid JSON) is skipped: a log appended to line by line may end mid-line."""
    p = Path(path)
    if not p.is_file():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
