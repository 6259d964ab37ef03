"""An experiment as data: the YAML spec that ``forethought experiment run | collect | render`` reads.

A spec names the runs (``forethought`` commands with placeholders, a grid of settings, seeds), what to read from
each finished run, the seed-paired comparisons, the checks with their thresholds, and the tables and plots of its
results section. It is loaded into the typed dataclasses below like every config (unknown keys, wrong types and
dangling references are one-line errors) and checked before anything runs. Shipped specs live in
``forethought/experiments/specs/`` so ``pip install`` users can list and run them too; any other YAML file works
the same way. No torch here: ``experiment list`` and a bad spec answer at once.
"""

from __future__ import annotations

import calendar
import fnmatch
import itertools
import re
import shlex
import string
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from forethought.core.config import at_least, field, from_mapping, yaml_problem
from forethought.core.errors import ForethoughtError

SPEC_DIR = Path(__file__).resolve().parent / "specs"
SYSTEMS = ("predgen", "psf", "myopia", "scaling")
# A derive or draw function: forethought.experiments.<module>:<function>.
FUNCTION = re.compile(r"forethought\.experiments\.[a-z_][a-z0-9_.]*:[A-Za-z_]\w*")
# Placeholders every step may use besides its grid's keys.
BUILTIN = ("seed", "run", "run_dir", "out_dir", "threads")
OPS = {">": lambda x, t: x > t, ">=": lambda x, t: x >= t, "<": lambda x, t: x < t, "<=": lambda x, t: x <= t}


@dataclass
class RunGroup:
    """Runs that share their commands: one run per grid point and seed, named ``<name>-s<seed>``."""

    name: str = field("", "the run name's template, e.g. '{task}-{method}' (grid keys as placeholders)")
    grid: dict[str, list[Any]] = field({}, "settings to cross: {key: [values]}; each key a placeholder")
    steps: list[str] = field([], "the forethought commands of one run, in order (without 'forethought'); "
                                 "placeholders: the grid's keys, {seed}, {run}, {run_dir}, {out_dir}, {threads}")
    seeds: list[int] | None = field(None, "this group's seeds (default: the spec's)")
    stage: int = field(0, "groups run in order of stage: every run of a stage finishes before the next stage starts "
                          "(e.g. a model folder other runs train from, or runs whose stages others copy)")


@dataclass
class Comparison:
    """A − B of one measure, paired by seed (only the seeds both have)."""

    name: str = field("", "the comparison's name in the results")
    measure: str = field("", "a measure's name")
    a: str = field("", "a run group's name (a run name without -s<seed>)")
    b: str = field("", "the group it is compared with")


@dataclass
class Check:
    """A threshold on a value of the collected results, e.g. ``comparisons.x.ci95_low > 0``."""

    name: str = field("", "what the check says, in a few words")
    value: str = field("", "comparisons.<name>.<mean|ci95_low|ci95_high>, groups.<group>.<measure>.<same> or "
                           "derived.<path> (what the spec's derive function wrote)")
    op: Literal[">", ">=", "<", "<="] = field(">", "how the value must compare with the threshold")
    threshold: float = field(0.0, "the threshold")


@dataclass
class Table:
    title: str = field("", "the table's heading")
    measures: list[str] = field([], "its columns (measures; default: all)")
    groups: list[str] = field([], "its rows (run groups; default: all, in spec order)")


@dataclass
class Plot:
    file: str = field("", "the PNG's name, written beside the collected JSON")
    measure: str = field("", "the measure drawn: one bar per group, mean ± std over seeds")
    groups: list[str] = field([], "the bars (default: all groups)")
    title: str = field("", "the plot's title")
    draw: str = field("", "'forethought.experiments.<module>:<function>' (the collected JSON, the PNG's path) that "
                          "draws this plot instead of bars of a measure (e.g. curves from 'derived')")


@dataclass
class ExperimentSpec:
    name: str = field("", "the experiment's name: its run folder, archive and results file")
    title: str = field("", "its results section's heading")
    system: Literal["predgen", "psf", "myopia", "scaling"] = field(
        "predgen", "the results page that shows it: a system's, or scaling (what running at scale costs)")
    description: str = field("", "what it measures and why, one screen at most")
    cost: str = field("", "what a run costs: CPU hours here, GPU hours for a paper-scale spec")
    data: bool = field(False, "the runs need FORETHOUGHT_DATA (a data root)")
    seeds: list[int] = field([0], "the seeds of every run group that names none")
    parallel: int = field(1, "runs at once")
    threads: int = field(1, "torch threads per run")
    launcher: str = field("", "what runs each command instead of 'python -m forethought.cli', e.g. 'accelerate "
                              "launch --num_processes 8 -m forethought.cli' for several GPUs")
    runs: list[RunGroup] = field([], "the run groups")
    retrain: dict[str, str] = field({}, "run name -> 'YYYY-MM-DD HH:MM' (UTC): a record of that run started before "
                                        "then is stale (e.g. trained on an earlier data stream): run trains it "
                                        "again and replaces its record; until then collect leaves it out")
    files: list[str] = field(["results.json"], "what each finished run keeps in the archive (JSON files relative "
                                               "to its folder; the first must exist when the run has finished)")
    measures: dict[str, str] = field({}, "name -> dotted path in a run's record (results.accuracy, "
                                         "diagnose.codes.zeroing_cost; a key may hold dots: results.p=0.3.loss); "
                                         "the record holds each file under its name without .json; grid keys and "
                                         "{seed} are placeholders (results.p={p}.{mode}.normalised_loss)")
    derive: str = field("", "'forethought.experiments.<module>:<function>' (records by run name, the collected "
                            "JSON) -> a JSON mapping kept under 'derived': what a table of measures cannot say")
    comparisons: list[Comparison] = field([], "seed-paired differences")
    checks: list[Check] = field([], "thresholds the results must meet")
    tables: list[Table] = field([], "tables of the results section (default: one of every measure)")
    plots: list[Plot] = field([], "bar plots")
    notes: str = field("", "the reading shown under the tables")

    def validate(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", self.name):
            raise ForethoughtError(f"name must be a plain file name (letters, digits, _ . -), got {self.name!r}")
        at_least(self, 1, "parallel", "threads")
        if not self.runs:
            raise ForethoughtError("runs: a spec needs at least one run group")
        if not self.files or not all(f.endswith(".json") for f in self.files):
            raise ForethoughtError(f"files: JSON files relative to a run folder, got {self.files}")
        if self.derive and not FUNCTION.fullmatch(self.derive):
            raise ForethoughtError(f"derive must name 'forethought.experiments.<module>:<function>', "
                                   f"got {self.derive!r}")
        for i, g in enumerate(self.runs):
            _check_group(g, i, self.seeds)
        groups = [p.group for p in plan(self)]
        runs = [p.run for p in plan(self)]
        for name, when in self.retrain.items():
            _known(name, runs, "retrain: run")
            retrain_before(when, name)
        dup = sorted({r for r in runs if runs.count(r) > 1})
        if dup:
            raise ForethoughtError(f"runs: two run groups give the same run name(s): {', '.join(dup[:3])}")
        known_groups = list(dict.fromkeys(groups))
        grid_keys = {k for g in self.runs for k in g.grid} | {"seed"}
        for name, path in self.measures.items():
            bad = _fields(path) - grid_keys
            if bad:
                raise ForethoughtError(f"measures.{name}: unknown placeholder(s) "
                                       f"{', '.join('{' + b + '}' for b in sorted(bad))} (known: the grid keys, seed)")
        for c in self.comparisons:
            _known(c.measure, self.measures, f"comparison '{c.name}': measure")
            _known(c.a, known_groups, f"comparison '{c.name}': a")
            _known(c.b, known_groups, f"comparison '{c.name}': b")
        names = [c.name for c in self.comparisons]
        if len(set(names)) != len(names) or not all(names):
            raise ForethoughtError("comparisons: every comparison needs a name of its own")
        for c in self.checks:
            check_path(c.value, self, known_groups, c.name)
        for t in self.tables:
            for m in t.measures:
                _known(m, self.measures, f"table '{t.title}': measure")
            for g in t.groups:
                _known(g, known_groups, f"table '{t.title}': group")
        for p in self.plots:
            if not p.file.endswith(".png"):
                raise ForethoughtError(f"plots: file must be a .png name, got {p.file!r}")
            if p.draw:
                if not FUNCTION.fullmatch(p.draw):
                    raise ForethoughtError(f"plot '{p.file}': draw must name 'forethought.experiments.<module>:"
                                           f"<function>', got {p.draw!r}")
                continue
            _known(p.measure, self.measures, f"plot '{p.file}': measure")
            for g in p.groups:
                _known(g, known_groups, f"plot '{p.file}': group")


def retrain_before(when: str, name: str = "") -> float:
    """A ``retrain`` time ('YYYY-MM-DD HH:MM', UTC) as epoch seconds."""
    try:
        return calendar.timegm(time.strptime(str(when), "%Y-%m-%d %H:%M"))
    except ValueError:
        raise ForethoughtError(f"retrain.{name}: give the time as 'YYYY-MM-DD HH:MM' (UTC), got {when!r}") from None


def _known(name: str, known: Any, what: str) -> None:
    if name not in known:
        raise ForethoughtError(f"{what} '{name}' is not defined (known: {', '.join(known) or 'none'})")


def _fields(template: str) -> set[str]:
    try:
        return {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as e:
        raise ForethoughtError(f"bad placeholder in {template!r}: {e}") from None


def _check_group(g: RunGroup, i: int, seeds: list[int]) -> None:
    where = f"runs.{i}"
    if not g.steps:
        raise ForethoughtError(f"{where}.steps: a run group needs at least one command")
    for k, values in g.grid.items():
        if k in BUILTIN or not k.isidentifier():
            raise ForethoughtError(f"{where}.grid: '{k}' cannot be a grid key (reserved: {', '.join(BUILTIN)})")
        if not isinstance(values, list) or not values:
            raise ForethoughtError(f"{where}.grid.{k}: give a non-empty list of values")
    allowed = set(g.grid) | set(BUILTIN)
    if g.stage < 0:
        raise ForethoughtError(f"{where}.stage must not be negative, got {g.stage}")
    for text in [g.name, *g.steps]:
        bad = _fields(text) - allowed
        if bad:
            raise ForethoughtError(f"{where}: unknown placeholder(s) {', '.join('{' + b + '}' for b in sorted(bad))} "
                                   f"in {text!r} (known: {', '.join(sorted(allowed))})")
    if _fields(g.name) & {"seed", "run", "run_dir", "out_dir", "threads"}:
        raise ForethoughtError(f"{where}.name: the name may use only grid keys (the seed is added as -s<seed>)")
    if not g.name and not g.grid:
        raise ForethoughtError(f"{where}.name: a group without a grid needs a name")
    missing = set(g.grid) - _fields(g.name) if g.name else set()
    if missing:
        raise ForethoughtError(f"{where}.name: {g.name!r} must use every grid key ({', '.join(sorted(missing))}), "
                               "or runs would share a name")
    if not (g.seeds if g.seeds is not None else seeds):
        raise ForethoughtError(f"{where}.seeds: no seeds")


def check_path(path: str, spec: ExperimentSpec, groups: list[str], name: str = "") -> None:
    """A check's value path must name something ``collect`` writes."""
    parts = path.split(".")
    what = f"check '{name}': value {path!r}"
    if parts[0] == "comparisons" and len(parts) == 3:
        _known(parts[1], [c.name for c in spec.comparisons], what + ": comparison")
        _known(parts[2], ("mean", "ci95_low", "ci95_high"), what + ": statistic")
    elif parts[0] == "derived" and len(parts) >= 2 and spec.derive:
        pass  # what derive writes is known only once it ran; a missing path reads as not measured
    elif parts[0] == "groups" and len(parts) == 4:
        _known(parts[1], groups, what + ": group")
        _known(parts[2], spec.measures, what + ": measure")
        _known(parts[3], ("mean", "ci95_low", "ci95_high"), what + ": statistic")
    else:
        raise ForethoughtError(f"{what} must be comparisons.<name>.<mean|ci95_low|ci95_high> or "
                               "groups.<group>.<measure>.<mean|ci95_low|ci95_high>")


@dataclass(frozen=True)
class PlannedRun:
    """One run of a spec: its group, seed, settings and commands (placeholders filled)."""

    run: str
    group: str
    seed: int
    settings: dict[str, Any]
    steps: tuple[tuple[str, ...], ...]  # each a forethought argv without the program name
    stage: int = 0

    def measure_path(self, template: str) -> str | None:
        """A measure's path for this run (``results.p={p}.{mode}.loss``: the run's grid values and seed), or None
        when it names a key this run's group has no value for."""
        try:
            return template.format(**{k: _word(v) for k, v in self.settings.items()}, seed=self.seed)
        except (KeyError, IndexError):
            return None


def _word(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def plan(spec: ExperimentSpec, out_dir: Path | str = "{out_dir}") -> list[PlannedRun]:
    """Every run of ``spec`` (seed-major, so a partial experiment stays balanced across groups), its commands
    split like a shell would and filled in; ``out_dir`` is the experiment's run folder."""
    out = []
    for g in spec.runs:
        keys = list(g.grid)
        points = [dict(zip(keys, vals, strict=True)) for vals in itertools.product(*(g.grid[k] for k in keys))]
        seeds = g.seeds if g.seeds is not None else spec.seeds
        for seed in seeds:
            for point in points:
                words = {k: _word(v) for k, v in point.items()}
                group = g.name.format(**words) if g.name else "-".join(words.values())
                run = f"{group}-s{seed}"
                values = {**words, "seed": str(seed), "run": run, "run_dir": str(Path(str(out_dir)) / run),
                          "out_dir": str(out_dir), "threads": str(spec.threads)}
                steps = []
                for text in g.steps:
                    try:
                        steps.append(tuple(w.format(**values) for w in shlex.split(text)))
                    except ValueError as e:
                        raise ForethoughtError(f"cannot split the command {text!r}: {e}") from None
                out.append(PlannedRun(run, group, seed, point, tuple(steps), g.stage))
    return sorted(out, key=lambda p: (p.stage, p.seed))  # stable: spec order within a stage and seed


def select(planned: list[PlannedRun], patterns: list[str] | None) -> list[PlannedRun]:
    """The planned runs whose group or run name matches one of the shell-style ``patterns`` (``arc-easy-*``,
    ``stsb-predgen-s0``); all of them for None. A pattern that matches no run is an error naming the groups."""
    if patterns is None:
        return planned
    if not patterns:
        raise ForethoughtError("--only: give at least one pattern")

    def matches(p: PlannedRun, pattern: str) -> bool:
        return fnmatch.fnmatchcase(p.group, pattern) or fnmatch.fnmatchcase(p.run, pattern)

    for pattern in patterns:
        if not any(matches(p, pattern) for p in planned):
            groups = ", ".join(dict.fromkeys(p.group for p in planned))
            raise ForethoughtError(f"--only: {pattern!r} matches no run (the groups: {groups})")
    return [p for p in planned if any(matches(p, pattern) for pattern in patterns)]


def spec_path(name_or_path: str) -> Path:
    """A YAML path, or the name of a shipped spec."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise ForethoughtError(f"spec file not found: {p}")
        return p
    shipped = SPEC_DIR / f"{name_or_path}.yaml"
    if shipped.is_file():
        return shipped
    raise ForethoughtError(f"'{name_or_path}' is neither a YAML file nor a shipped spec "
                           f"(see 'forethought experiment list')")


def load_spec(name_or_path: str) -> tuple[ExperimentSpec, Path]:
    """The spec, checked, and the file it came from."""
    path = spec_path(name_or_path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ForethoughtError(f"spec {path} is not valid YAML: {yaml_problem(e)}") from None
    try:
        spec = from_mapping(ExperimentSpec, data)
        spec.validate()
    except ForethoughtError as e:
        raise ForethoughtError(f"spec {path}: {e}") from None
    if spec.name != path.stem:
        raise ForethoughtError(f"spec {path}: name '{spec.name}' must be the file's name ('{path.stem}')")
    return spec, path


def shipped_specs() -> list[Path]:
    return sorted(SPEC_DIR.glob("*.yaml"))
