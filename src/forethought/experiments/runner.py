"""``forethought experiment run | collect | render``: a spec's runs through the job queue, their records into one
results JSON, that JSON into its results section.

Where an experiment's files live (:class:`Layout`, under a root folder, the repository for the shipped specs):
``runs/<name>/`` the run folders and logs (ignored by git), ``benchmarks/results/runs/<name>/<run>.json`` each
finished run's record (committed: a fresh machine collects from it alone), ``benchmarks/results/<name>.json`` the
collected results (+ its plots). ``run`` skips the runs whose record is archived and the steps that finished
with the same command, so it resumes after a crash or on another machine.

The collected JSON has one schema for every experiment (``SCHEMA``): ``spec`` (name, file, SHA-256),
``provenance`` (the invocations, each run's command and wall time, the commits, machines and package versions
from the runs' own env.json, the experiment's wall time), ``runs`` (group, seed, settings, measures), ``groups``
(each measure over seeds: mean, std, Student-t interval), ``comparisons`` (seed-paired differences) and
``checks`` (value, threshold, passed).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forethought.core.errors import ForethoughtError
from forethought.core.io import atomic_write_json
from forethought.experiments.archive import finished_run, invocations, span_s
from forethought.experiments.jobs import Job, JobFailed, run_queue
from forethought.experiments.spec import OPS, ExperimentSpec, PlannedRun, plan, retrain_before, select
from forethought.experiments.stats import over_seeds, seed_paired

SCHEMA = "forethought.experiment/1"


@dataclass(frozen=True)
class Layout:
    """The folders of one experiment under ``root``."""

    runs: Path  # run folders and job logs
    archive: Path  # one record per finished run (committed)
    results: Path  # the collected JSON; plots beside it

    @classmethod
    def under(cls, root: Path, name: str) -> Layout:
        root = Path(root)
        return cls(root / "runs" / name, root / "benchmarks" / "results" / "runs" / name,
                   root / "benchmarks" / "results" / f"{name}.json")


def _job_name(run: str, step: int) -> str:
    return run if step == 0 else f"{run}.step{step}"


def run(spec: ExperimentSpec, layout: Layout, command: str, parse: Callable[[tuple[str, ...]], None] | None = None,
        progress: Callable[[str], None] = print, spec_file: Path | None = None,
        collect_as: ExperimentSpec | None = None, only: list[str] | None = None) -> dict[str, Any]:
    """Run every unfinished run of ``spec`` that ``only``'s patterns match (:func:`select`), step by step (all
    runs' first commands, then their second, ...), ``spec.parallel`` at a time with ``spec.threads`` threads each;
    archive each run when its last step finishes; then :func:`collect` (of ``collect_as`` when given: the whole
    spec after a run of some of its runs). ``parse`` checks every command before anything starts (the CLI's
    parser: a typo in a spec fails here, not hours later)."""
    planned = select(plan(spec, layout.runs), only)
    if parse is not None:
        check_commands(planned, parse)
    todo = [p for p in planned if current_run(spec, layout, p.run) is None]
    progress(f"{spec.name}: {len(planned) - len(todo)} of {len(planned)} runs finished; running {len(todo)}")
    for stage in sorted({p.stage for p in todo}):  # a stage's runs all finish before the next stage starts
        _run_steps(spec, layout, [p for p in todo if p.stage == stage], progress)
    return collect(collect_as or spec, layout, command, spec_file)


def current_run(spec: ExperimentSpec, layout: Layout, run: str) -> dict[str, Any] | None:
    """A run's record (:func:`finished_run`), or None when it has not finished or its record is stale: it started
    before the spec's ``retrain`` time for it."""
    record = finished_run(layout.runs / run, layout.archive, spec.files)
    if record is not None and run in spec.retrain and (record.get("started") or 0) < retrain_before(spec.retrain[run]):
        return None
    return record


def check_commands(planned: list[PlannedRun], parse: Callable[[tuple[str, ...]], None]) -> None:
    for p in planned:
        for argv in p.steps:
            try:
                parse(argv)
            except ForethoughtError as e:
                raise ForethoughtError(f"run {p.run}: 'forethought {' '.join(argv)}': {e}") from None


def _run_steps(spec: ExperimentSpec, layout: Layout, todo: list[PlannedRun], progress: Callable[[str], None]) -> None:
    n_steps = max(len(p.steps) for p in todo)
    last = {_job_name(p.run, len(p.steps) - 1): p.run for p in todo}

    def archive(job: str) -> None:
        if job in last:
            run_dir = layout.runs / last[job]
            if finished_run(run_dir, layout.archive, spec.files) is None:
                raise ForethoughtError(f"run {last[job]} finished without writing {run_dir / spec.files[0]}")
            progress(f"{spec.name}: {last[job]} finished and archived")

    for k in range(n_steps):
        jobs = [Job(_job_name(p.run, k), (*launcher(spec), *p.steps[k]))
                for p in todo if k < len(p.steps)]
        try:
            run_queue(jobs, spec.parallel, layout.runs / "logs", threads=spec.threads, on_done=archive, resume=True)
        except JobFailed as e:
            raise ForethoughtError(str(e)) from None


def launcher(spec: ExperimentSpec) -> tuple[str, ...]:
    """The words before each command: this interpreter's CLI, or the spec's launcher (accelerate, torchrun)."""
    return tuple(shlex.split(spec.launcher)) if spec.launcher else (sys.executable, "-m", "forethought.cli")


def lookup(record: Any, path: str) -> Any:
    """The value at a dotted path of a record (mapping keys, the longest that matches first, so a key may hold dots
    like ``p=0.3``; list indices as numbers), or KeyError."""
    node, parts, i = record, path.split("."), 0
    while i < len(parts):
        if isinstance(node, dict):
            j = next((j for j in range(len(parts), i, -1) if ".".join(parts[i:j]) in node), None)
            if j is None:
                raise KeyError(parts[i])
            node, i = node[".".join(parts[i:j])], j
        elif isinstance(node, list) and parts[i].lstrip("-").isdigit() and -len(node) <= int(parts[i]) < len(node):
            node, i = node[int(parts[i])], i + 1
        else:
            raise KeyError(parts[i])
    return node


def _measures(spec: ExperimentSpec, planned: PlannedRun, record: dict[str, Any]) -> dict[str, float]:
    out, run = {}, planned.run
    for name, template in spec.measures.items():
        path = planned.measure_path(template)
        if path is None:
            continue  # the measure names a grid key this run's group does not have
        try:
            value = lookup(record, path)
        except KeyError:
            continue  # e.g. a measure only some groups write; a measure no run has is an error (collect)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ForethoughtError(f"run {run}: measure '{name}' ({path}) is not a number: {value!r}")
        out[name] = float(value)
    return out


def _interval_of(stats: dict[str, Any]) -> tuple[float | None, float | None]:
    ci = stats.get("ci95_of_mean")
    return (ci[0], ci[1]) if ci else (None, None)


def _summary(stats: dict[str, Any]) -> dict[str, Any]:
    low, high = _interval_of(stats)
    return {**stats, "ci95_low": low, "ci95_high": high}


def _provenance(spec_file: Path, records: dict[str, dict[str, Any]], layout: Layout, command: str) -> dict[str, Any]:
    envs = [r.get("env") or {} for r in records.values()]
    machines = sorted({json.dumps(e["machine"], sort_keys=True) for e in envs if e.get("machine")})
    versions: dict[str, set] = {}
    for e in envs:
        for pkg, v in (e.get("packages") or {}).items():
            versions.setdefault(pkg, set()).add(str(v))
    return {
        "invocations": invocations(layout.archive, command),
        "runs": {name: {"command": r.get("command"), "started": r.get("started"), "finished": r.get("finished"),
                        "torch_threads": r.get("torch_threads")} for name, r in records.items()},
        "commits": sorted({e["git"] for e in envs if e.get("git")}),
        "machines": [json.loads(m) for m in machines],
        "versions": {pkg: sorted(vs) for pkg, vs in sorted(versions.items())},
        "runs_without_env": sorted(n for n, r in records.items() if not r.get("env")),
        "wall_s": span_s(records),
    }


def collect(spec: ExperimentSpec, layout: Layout, command: str, spec_file: Path | None = None) -> dict[str, Any]:
    """The finished runs' records (run folders, else the archive) -> one results JSON (written to
    ``layout.results``, plots beside it) -> returned. Unfinished runs are left out and listed; so are the measures
    no finished run holds yet (an error once every run has finished: the spec names a wrong path)."""
    planned = plan(spec, layout.runs)
    records = {p.run: r for p in planned if (r := current_run(spec, layout, p.run))}
    if not records:
        raise ForethoughtError(f"{spec.name}: no finished run yet (run 'forethought experiment run {spec.name}')")
    runs, by_group = {}, {}
    for p in planned:
        if p.run not in records:
            continue
        m = _measures(spec, p, records[p.run])
        runs[p.run] = {"group": p.group, "seed": p.seed, "settings": p.settings, "measures": m}
        by_group.setdefault(p.group, {"settings": p.settings, "values": {}})
        for name, value in m.items():
            by_group[p.group]["values"].setdefault(name, {})[p.seed] = value
    found = {name for r in runs.values() for name in r["measures"]}
    unfinished = [p.run for p in planned if p.run not in records]
    lost = [n for n in spec.measures if n not in found]
    if lost and not unfinished:  # every run finished and none holds it: a wrong path in the spec
        keys = sorted(next(iter(records.values())))
        named = ", ".join(f"'{n}' ({spec.measures[n]})" for n in lost)
        raise ForethoughtError(f"{spec.name}: measure(s) {named} found in no finished run "
                               f"(a record holds: {', '.join(keys)})")
    groups = {g: {"settings": d["settings"],
                  "measures": {n: _summary(over_seeds(v)) for n, v in d["values"].items()}}
              for g, d in by_group.items()}
    comparisons = {}
    for c in spec.comparisons:
        a = by_group.get(c.a, {}).get("values", {}).get(c.measure, {})
        b = by_group.get(c.b, {}).get("values", {}).get(c.measure, {})
        entry: dict[str, Any] = {"measure": c.measure, "a": c.a, "b": c.b}
        if set(a) & set(b):
            entry.update(_summary(seed_paired(a, b)))
        else:
            entry["missing"] = "no seed finished for both sides"
        comparisons[c.name] = entry
    out = {"schema": SCHEMA, "name": spec.name, "title": spec.title, "system": spec.system,
           "spec": _spec_record(spec, spec_file), "measures": spec.measures, "runs": runs,
           "unfinished": unfinished, "groups": groups, "comparisons": comparisons}
    if lost:  # a partial experiment: the runs that hold these have not finished yet
        out["not_measured_yet"] = lost
    if spec.derive:
        out["derived"] = named_function(spec.derive)(records, out)
    out["checks"] = {c.name: _check(c, out) for c in spec.checks}
    out["provenance"] = _provenance(spec_file or Path(spec.name), records, layout, command)
    layout.results.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(layout.results, out)
    _plots(spec, out, layout.results.parent)
    return out


def named_function(target: str) -> Callable[..., Any]:
    """The function a spec's ``derive`` or a plot's ``draw`` names (validated to lie in forethought.experiments)."""
    module, name = target.split(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ForethoughtError(f"{target!r} not found ({e})") from None


def _spec_record(spec: ExperimentSpec, spec_file: Path | None) -> dict[str, Any]:
    if spec_file is None:
        return {"name": spec.name}
    text = Path(spec_file).read_bytes()
    return {"name": spec.name, "file": Path(spec_file).name, "sha256": hashlib.sha256(text).hexdigest()}


def _check(check: Any, collected: dict[str, Any]) -> dict[str, Any]:
    entry = {"value": check.value, "op": check.op, "threshold": check.threshold}
    parts = check.value.split(".")
    if parts[0] == "groups":  # groups.<group>.<measure>.<stat> names groups.<group>.measures.<measure>.<stat>
        parts.insert(2, "measures")
    try:
        observed = lookup(collected, ".".join(parts))
    except KeyError:
        observed = None
    if observed is None:  # not measured yet (unfinished runs, one seed: no interval)
        return {**entry, "observed": None, "passed": None}
    return {**entry, "observed": observed, "passed": bool(OPS[check.op](observed, check.threshold))}


def _plots(spec: ExperimentSpec, collected: dict[str, Any], folder: Path) -> None:
    from forethought.core.plots import bar_plot  # matplotlib only when there is something to draw

    for p in spec.plots:
        if p.draw:
            named_function(p.draw)(collected, folder / p.file)
            continue
        bars = {}
        for g in p.groups or list(collected["groups"]):
            s = collected["groups"].get(g, {}).get("measures", {}).get(p.measure)
            if s is not None:
                bars[g] = (s["mean"], s["std"] or 0.0)
        if bars:
            bar_plot(bars, folder / p.file, title=p.title or f"{spec.title}: {p.measure}", ylabel=p.measure)
