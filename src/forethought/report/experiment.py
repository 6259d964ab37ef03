"""The one renderer of an experiment's collected JSON (``forethought experiment collect``): its tables (each
measure's mean ± std over seeds per run group), the seed-paired comparisons with their intervals, the checks and
where the numbers came from. A spec's ``notes`` is the reading under them; nothing here knows any system."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_text, read_json_object
from forethought.experiments.commands import ExperimentConfig, load_for
from forethought.experiments.runner import Layout
from forethought.experiments.spec import ExperimentSpec
from forethought.report.fmt import interval, mean_std, minutes, num, table


def _cell(stats: dict[str, Any] | None) -> str:
    if stats is None:
        return "–"
    return f"{mean_std(stats['mean'], stats['std'])} ({len(stats['seeds'])})"


def _settings(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in settings.items()) or "–"


def _value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return "–" if v is None else str(v).lower()
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return num(v, ".4g") if abs(v) >= 1e4 or (v != 0 and abs(v) < 1e-3) else num(v, ".4f")
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def _leaves(d: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(path, value) of every scalar and short list of scalars in a nested mapping; long lists (curves) are left
    to the JSON."""
    if isinstance(d, dict):
        return [leaf for k, v in d.items() for leaf in _leaves(v, (*path, str(k)))]
    if isinstance(d, list) and (len(d) > 4 or any(isinstance(x, (dict, list)) for x in d)):
        return []
    return [(path, d)]


def derived_tables(derived: dict[str, Any]) -> list[str]:
    """The derived mapping as one table per top-level key: a row per path to a leaf's parent, a column per leaf
    name (so a comparison's difference, interval and test sit on one line)."""
    out = []
    for key, value in derived.items():
        leaves = _leaves(value)
        if not leaves:
            continue
        if all(len(path) == 0 for path, _ in leaves):  # a scalar
            out += [f"- {key}: {_value(value)}"]
            continue
        rows: dict[str, dict[str, Any]] = {}
        for path, v in leaves:
            rows.setdefault(" / ".join(path[:-1]) or "–", {})[path[-1]] = v
        columns = list(dict.fromkeys(c for r in rows.values() for c in r))
        out += ["", f"*{key}*", "", *table(["", *columns], [[r, *(_value(cells.get(c)) for c in columns)]
                                                            for r, cells in rows.items()])]
    return out


def measure_tables(spec: ExperimentSpec, data: dict[str, Any]) -> list[str]:
    """The spec's tables of measures (mean ± std over seeds per run group; groups that have not run are left out)."""
    out: list[str] = []
    groups = data["groups"]
    for t in spec.tables or [None]:
        measures = (t.measures if t and t.measures else list(spec.measures))
        rows = [g for g in (t.groups if t and t.groups else groups) if g in groups]
        if out:
            out.append("")
        if t and t.title:
            if out and out[-1]:  # a paragraph of its own, not the end of the previous table's note
                out.append("")
            out += [f"**{t.title}**", ""]
        if not rows:
            out.append("No run of this table has finished yet.")
            continue
        out += table(["run group", "settings", *measures],
                     [[g, _settings(groups[g]["settings"]), *(_cell(groups[g]["measures"].get(m)) for m in measures)]
                      for g in rows])
        out += ["", "Each cell: mean ± std over seeds (number of seeds)."]
    return out


def checks_table(data: dict[str, Any]) -> list[str]:
    """The spec's checks: condition, observed value, met / MISSED / not measured yet."""
    rows = []
    for name, c in data["checks"].items():
        state = "met" if c["passed"] else "MISSED" if c["passed"] is False else "not measured yet"
        rows.append([name, f"`{c['value']}` {c['op']} {c['threshold']:g}", num(c["observed"], ".4f"), f"**{state}**"])
    return table(["check", "condition", "observed", ""], rows) if rows else []


def comparisons_table(data: dict[str, Any]) -> list[str]:
    """The seed-paired comparisons of a collected file as a table, after a blank line (none: no lines)."""
    if not data["comparisons"]:
        return []
    rows = []
    for name, c in data["comparisons"].items():
        if "missing" in c:
            rows.append([name, f"{c['a']} − {c['b']}", c["measure"], "–", "–", c["missing"]])
            continue
        ci = [c["ci95_low"], c["ci95_high"]] if c["ci95_low"] is not None else None
        rows.append([name, f"{c['a']} − {c['b']}", c["measure"], num(c["mean"], "+.4f"), interval(ci, "+.4f"),
                     ", ".join(str(s) for s in c["seeds"])])
    return ["", "Seed-paired differences (95 % Student-t interval of the mean difference over seeds; it "
                "shows what varies with the seed, not the spread over evaluation examples):", "",
            *table(["comparison", "A − B", "measure", "mean", "95 % interval", "seeds"], rows)]


def summary(spec: ExperimentSpec, data: dict[str, Any], derived: tuple[str, ...] = (),
            comparisons: bool = False) -> list[str]:
    """A short form of :func:`body` for a block in a system doc: the tables of measures, the seed-paired
    comparisons when asked, the named keys of the derived values, the checks."""
    out = measure_tables(spec, data)
    if comparisons:
        out += comparisons_table(data)
    picked = {k: data["derived"][k] for k in derived if k in data.get("derived", {})}
    if picked:
        out += derived_tables(picked)
    if data["checks"]:
        out += ["", *checks_table(data)]
    return out


def body(spec: ExperimentSpec, data: dict[str, Any], lead: list[str] | None = None) -> list[str]:
    """The section's markdown lines (without its heading), from the collected JSON ``data``; ``lead``: a system's
    own lines (e.g. its main table) placed after the description."""
    out = [spec.description.strip(), ""] if spec.description else []
    out += [*lead, ""] if lead else []
    out += measure_tables(spec, data)
    out += comparisons_table(data)
    if data.get("derived"):
        out += ["", "Derived (the spec's derive function; lists longer than four are in the JSON):",
                *derived_tables(data["derived"])]
    if data["checks"]:
        out += ["", *checks_table(data)]
    prov = data["provenance"]
    runs = len(data["runs"])
    unfinished = f"; unfinished: {', '.join(data['unfinished'])}" if data["unfinished"] else ""
    if data.get("not_measured_yet"):
        unfinished += f"; not measured yet (no finished run holds them): {', '.join(data['not_measured_yet'])}"
    commits = ", ".join(c[:10] for c in prov["commits"]) or "not recorded"
    out += ["", f"{runs} runs, {minutes(prov['wall_s'])} min from the first run's start to the last run's end; "
                f"commits {commits}{unfinished}."]
    for p in spec.plots:
        out += ["", f"![{p.file}](../../benchmarks/results/{p.file})"]
    if spec.notes:
        out += ["", spec.notes.strip()]
    return out


def section(spec: ExperimentSpec, data: dict[str, Any]) -> list[str]:
    """A whole results section: heading, the command that reproduces it, :func:`body`."""
    return [f"## {spec.title}", "", f"`forethought experiment run {spec.name}` → `benchmarks/results/{spec.name}.json`",
            "", *body(spec, data)]


def render(cfg: ExperimentConfig, resume: str | None = None) -> None:
    """``forethought experiment render SPEC``: its section from the collected JSON, printed or written to --out."""
    spec, _ = load_for(cfg)
    results = Layout.under(Path(cfg.root), spec.name).results
    if not results.is_file():
        raise ForethoughtError(f"{results} not found: run 'forethought experiment collect {spec.name}' first")
    text = "\n".join(section(spec, read_json_object(results))) + "\n"
    if cfg.out:
        atomic_write_text(Path(cfg.out), text)
    else:
        print(text, end="")
