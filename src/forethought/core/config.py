"""Typed configs: nested dataclasses, loaded from YAML, overridden from the command line with dotted keys.

A config class is a dataclass whose fields are plain values or nested dataclasses. Each field may carry a
``help`` entry in its metadata; it is shown by ``forethought <cmd> --help`` and ``forethought config show <cmd>``.
Unknown keys and values of the wrong type raise :class:`ForethoughtError` naming the key, so a typo never silently
does nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import re
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from forethought.core.errors import ForethoughtError, first_line

T = TypeVar("T")


def field(default: Any, help: str = "") -> Any:  # noqa: A002 - mirrors argparse's name
    """A dataclass field with a help string (mutable defaults are copied per instance, nested sections deeply:
    a shallow copy would share a section's own sections between every instance)."""
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata={"help": help})
    if dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _keys(cls: type, prefix: str = "") -> list[str]:
    out = []
    for f in dataclasses.fields(cls):
        t = _hints(cls)[f.name]
        if dataclasses.is_dataclass(t):
            out += _keys(t, f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def _coerce(key: str, value: Any, t: Any) -> Any:
    """Check/convert a YAML-parsed value to the annotated type ``t``."""
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(t)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(key, value, a)
            except ForethoughtError as e:
                errors.append(str(e))
        raise ForethoughtError(errors[0] if errors else f"config key '{key}': bad value {value!r}")
    if origin is typing.Literal:
        allowed = typing.get_args(t)
        if value not in allowed:
            choices = ", ".join(repr(a) for a in allowed)
            close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ForethoughtError(f"config key '{key}' must be one of {choices}, got {value!r}{hint}")
        return value
    if origin in (list, tuple):
        if isinstance(value, (str, int, float)):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise ForethoughtError(f"config key '{key}' expects a list, got {value!r}")
        (inner,) = typing.get_args(t)[:1] or (Any,)
        return [_coerce(key, v, inner) for v in value]
    if origin is dict:
        if not isinstance(value, dict):
            raise ForethoughtError(f"config key '{key}' expects a mapping, got {value!r}")
        kt, vt = typing.get_args(t) or (Any, Any)
        return {_coerce(key, k, kt): _coerce(f"{key}.{k}", v, vt) for k, v in value.items()}
    if dataclasses.is_dataclass(t):
        return from_mapping(t, value, key)
    if t is Any:
        return value
    if t is bool:
        if isinstance(value, bool):
            return value
        raise ForethoughtError(f"config key '{key}' expects true/false, got {value!r}")
    if t is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ForethoughtError(f"config key '{key}' expects an integer, got {value!r}")
    if t is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML reads "1e-3" as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ForethoughtError(f"config key '{key}' expects a number, got {value!r}")
    if t is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ForethoughtError(f"config key '{key}' expects a string, got {value!r}")
    return value


def from_mapping(cls: type[T], data: Any, where: str = "") -> T:
    """A config object of ``cls`` from a parsed YAML mapping, every key checked and coerced by its type like a
    config file's; for sections whose fields hold lists or mappings of further sections (an experiment spec's
    runs). ``where`` prefixes the keys in error messages (``runs.0.steps``)."""
    prefix = f"{where}." if where else ""
    if not isinstance(data, dict):
        raise ForethoughtError(f"config key '{where or cls.__name__}' expects a mapping of keys to values, "
                               f"got {data!r}")
    obj = cls()
    names = {f.name for f in dataclasses.fields(cls)}
    hints = _hints(cls)
    for k, v in data.items():
        if k not in names:
            close = difflib.get_close_matches(str(k), sorted(names), n=1)
            hint = f" (did you mean '{prefix}{close[0]}'?)" if close else ""
            raise ForethoughtError(f"unknown config key '{prefix}{k}'{hint}")
        t = hints[k]
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            setattr(obj, k, from_mapping(t, v, prefix + k))
        elif typing.get_origin(t) in (list, tuple) and isinstance(v, list):
            (inner,) = typing.get_args(t)[:1] or (Any,)
            setattr(obj, k, [_coerce(f"{prefix}{k}.{i}", x, inner) for i, x in enumerate(v)])
        else:
            setattr(obj, k, _coerce(prefix + k, v, t))
    return obj


def _unknown(key: str, cls: type) -> ForethoughtError:
    close = difflib.get_close_matches(key, _keys(cls), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ForethoughtError(f"unknown config key '{key}'{hint}")


def _apply(obj: Any, key: str, value: Any, root_cls: type) -> None:
    parts = key.split(".")
    target = obj
    for p in parts[:-1]:
        if not dataclasses.is_dataclass(target) or p not in {f.name for f in dataclasses.fields(target)}:
            raise _unknown(key, root_cls)
        target = getattr(target, p)
    name = parts[-1]
    if not dataclasses.is_dataclass(target) or name not in {f.name for f in dataclasses.fields(target)}:
        raise _unknown(key, root_cls)
    t = _hints(type(target))[name]
    if isinstance(value, CliText):
        try:
            value = parse_cli_value(str(value), t)
        except ForethoughtError as e:
            raise ForethoughtError(f"config key '{key}': {e}") from None
    if dataclasses.is_dataclass(t):
        if not isinstance(value, dict):
            raise ForethoughtError(f"config key '{key}' is a section; give its keys, e.g. '{key}.<name>'")
        for k, v in value.items():
            _apply(obj, f"{key}.{k}", v, root_cls)
        return
    setattr(target, name, _coerce(key, value, t))


def _flatten(d: dict, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out += _flatten(v, f"{prefix}{k}.")
        else:
            out.append((prefix + str(k), v))
    return out


class CliText(str):
    """An override's text exactly as typed; parsed once the key's type is known (see :func:`parse_cli_value`)."""


_ESCAPES = re.compile(r"\\(\\|n|t)")


def decode_escapes(text: str) -> str:
    """``\\n`` -> newline and ``\\t`` -> tab, as a shell cannot type them; ``\\\\`` is one backslash."""
    return _ESCAPES.sub(lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], text)


def _accepts_str(t: Any) -> bool:
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        return str in typing.get_args(t)
    if origin is typing.Literal:  # a choice of words: 'no' / 'null' stay words, not YAML's false / None
        return all(isinstance(a, str) for a in typing.get_args(t))
    return t is str


def _is_str_list(t: Any) -> bool:
    return typing.get_origin(t) in (list, tuple) and _accepts_str((typing.get_args(t) or (Any,))[0])


def parse_cli_value(text: str, t: Any) -> Any:
    """A command-line value for a key of type ``t``: string keys keep the text as typed (escapes decoded, so
    ``"Review: {text}"`` stays a string), string-list keys keep their items as strings (``[no, yes]`` is two
    words, not two booleans), every other key is read as YAML (numbers, booleans, lists, null)."""
    if _accepts_str(t):
        return decode_escapes(text)
    if _is_str_list(t):
        try:
            items = yaml.load(text, Loader=yaml.BaseLoader) if text.strip() else []  # every scalar a string
        except yaml.YAMLError as e:
            raise ForethoughtError(f"bad list {text!r}: {yaml_problem(e)}") from None
        if isinstance(items, str):
            items = [items]
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ForethoughtError(f"expects a list of strings like [a, b], got {text!r}")
        return [decode_escapes(i) for i in items]
    try:
        return yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError:
        return text


def parse_overrides(args: list[str]) -> list[tuple[str, Any]]:
    """``['--train.steps', '6', 'model.n_layer=2']`` -> ``[('train.steps', '6'), ('model.n_layer', '2')]``:
    (key, :class:`CliText`) pairs, parsed by the key's type when applied."""
    out: list[tuple[str, Any]] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
        elif a.startswith("--"):
            if i + 1 >= len(args) or args[i + 1].startswith("--"):  # "-5" is a value, "--x" the next option
                raise ForethoughtError(f"option '{a}' needs a value")
            k, v = a[2:], args[i + 1]
            i += 1
        elif "=" in a:
            k, v = a.split("=", 1)
        else:
            raise ForethoughtError(f"unexpected argument '{a}' (config overrides look like --section.key VALUE)")
        out.append((k.replace("-", "_"), CliText(v)))
        i += 1
    return out


def yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where (PyYAML's own message spans several lines)."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or first_line(e)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Defaults of ``cls``, then the YAML file at ``path``, then the dotted ``overrides``."""
    cfg = cls()
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ForethoughtError(f"config file not found: {p}")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ForethoughtError(f"config file {p} is not valid YAML: {yaml_problem(e)}") from None
        if not isinstance(data, dict):
            raise ForethoughtError(f"config file {p} must hold a mapping of keys to values")
        for k, v in _flatten(data):
            _apply(cfg, k, v, cls)
    for k, v in parse_overrides(overrides or []):
        _apply(cfg, k, v, cls)
    validate_all(cfg)
    return cfg


def validate_all(cfg: Any, section: str = "") -> None:
    """Call ``validate()`` on every section that has one, innermost first, so a bad value anywhere fails when
    the config is loaded — before anything is trained or written. A nested section's message is prefixed with
    its path (``ar.train: steps must not be negative``)."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            validate_all(value, f"{section}{f.name}.")
    validate = getattr(cfg, "validate", None)
    if callable(validate):
        try:
            validate()
        except ForethoughtError as e:
            if not section or str(e).startswith(section):  # a message that names its own path keeps it
                raise
            raise ForethoughtError(f"{section.rstrip('.')}: {e}") from None


# ---- range checks for the config classes' validate() methods ----------------------------------------------
# One readable line per bad value, naming the key and what it must be; NaN fails every check (its comparisons
# are all false), so a typo like "nan" never reaches training.


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def at_least(obj: Any, low: float, *names: str) -> None:
    """Each named setting of ``obj`` is a finite number >= ``low``."""
    for name in names:
        value = getattr(obj, name)
        if not (_number(value) and value >= low):
            raise ForethoughtError(f"{name} must be at least {low:g}, got {value!r}")


def positive(obj: Any, *names: str) -> None:
    """Each named setting of ``obj`` is a finite number > 0."""
    for name in names:
        value = getattr(obj, name)
        if not (_number(value) and value > 0):
            raise ForethoughtError(f"{name} must be a positive number, got {value!r}")


def within(obj: Any, low: float, high: float, *names: str, high_open: bool = False) -> None:
    """Each named setting of ``obj`` is in [low, high] (or [low, high) with ``high_open``)."""
    for name in names:
        value = getattr(obj, name)
        ok = _number(value) and low <= value and (value < high if high_open else value <= high)
        if not ok:
            raise ForethoughtError(f"{name} must be in [{low:g}, {high:g}{')' if high_open else ']'}, got {value!r}")


def finite(obj: Any, *names: str) -> None:
    """Each named setting of ``obj`` is a finite number (any sign)."""
    for name in names:
        value = getattr(obj, name)
        if not _number(value):
            raise ForethoughtError(f"{name} must be a finite number, got {value!r}")


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


def save_yaml(cfg: Any, path: Path) -> None:
    from forethought.core.io import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(to_dict(cfg), sort_keys=False))


def type_name(t: Any) -> str:
    """A key's annotated type as a reader writes it in YAML: ``int``, ``str | null``, ``list[float]``, and a
    choice as its values (``causal | block_causal | full``)."""
    origin = typing.get_origin(t)
    if origin is typing.Literal:
        return " | ".join(inline_yaml(a) for a in typing.get_args(t))
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else type_name(a) for a in typing.get_args(t))
    if origin in (list, tuple, dict):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in typing.get_args(t))}]"
    if t is Any:
        return "any"
    return getattr(t, "__name__", str(t))


def inline_yaml(value: Any) -> str:
    """``value`` as one line of YAML, as it is typed after ``--key`` or in a config file (``null``, ``true``,
    ``[1, 2]``, ``''``)."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(inline_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{inline_yaml(k)}: {inline_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str) and not value.isprintable():
        return json.dumps(value, ensure_ascii=False)  # one line: YAML reads JSON's escapes (\n, \t) back
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf, allow_unicode=True)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def _wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest, break_long_words=False,
                         break_on_hyphens=False) or [first.rstrip()]


def _sections(cls: type, inst: Any, prefix: str = "") -> list[tuple[str, str, list[tuple[str, Any, Any, str]]]]:
    """(section path, section help, [(key, type, default, help)]) for the top level and every nested section,
    depth first, each key's default being the one the command gives it (e.g. its own run name)."""
    keys, nested = [], []
    for f in dataclasses.fields(cls):
        t = _hints(cls)[f.name]
        if dataclasses.is_dataclass(t):
            sub = _sections(t, getattr(inst, f.name), f"{prefix}{f.name}.")
            nested += [(sub[0][0], f.metadata.get("help", ""), sub[0][2]), *sub[1:]]
        else:
            keys.append((prefix + f.name, t, getattr(inst, f.name), f.metadata.get("help", "")))
    return [(prefix.rstrip("."), "", keys), *nested]


def help_sections(cls: type, width: int = 100) -> list[str]:
    """The config keys for ``--help``, grouped under one heading per section (``model:``, ``ar.train:``), each
    key with its default and help wrapped to ``width`` columns."""
    lines: list[str] = []
    for path, help_text, keys in _sections(cls, cls()):
        if not keys:
            continue
        heading = f"{path or 'settings'}:" + (f"  {help_text}" if help_text else "")
        lines += ["", *_wrap(heading, width, "", "    ")]
        for key, _, default, key_help in keys:
            lines += _wrap(f"--{key} {inline_yaml(default)}  {key_help}".rstrip(), width, "  ", "        ")
    return lines


def show_yaml(cfg: Any, width: int = 100) -> str:
    """``cfg`` as a YAML config file that ``--config`` loads back to the same config: every key with a comment
    above it giving its type, its default (the command's) and its help, each section with its help."""
    return "\n".join(_show(type(cfg), cfg, type(cfg)(), "", width)) + "\n"


def _show(cls: type, cfg: Any, default: Any, indent: str, width: int) -> list[str]:
    lines = []
    for f in dataclasses.fields(cls):
        t = _hints(cls)[f.name]
        value, key_help = getattr(cfg, f.name), f.metadata.get("help", "")
        if dataclasses.is_dataclass(t):
            if key_help:
                lines += _wrap(key_help, width, f"{indent}# ", f"{indent}#   ")
            lines.append(f"{indent}{f.name}:")
            lines += _show(t, value, getattr(default, f.name), indent + "  ", width)
            continue
        note = f"{type_name(t)}, default {inline_yaml(getattr(default, f.name))}" + (f": {key_help}" if key_help
                                                                                     else "")
        lines += _wrap(note, width, f"{indent}# ", f"{indent}#   ")
        lines.append(f"{indent}{f.name}: {inline_yaml(value)}")  # a key's value: a scalar or a list of them
    return lines
