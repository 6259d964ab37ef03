"""The ``forethought experiment`` verbs ``list``, ``run`` and ``collect`` (``render`` is the report's:
:func:`forethought.report.experiment.render`). The config class imports no torch: a bad spec answers before
anything loads."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from forethought.core.config import field
from forethought.core.errors import ForethoughtError
from forethought.experiments.runner import Layout, launcher
from forethought.experiments.spec import ExperimentSpec, load_spec, plan, select, shipped_specs


@dataclass
class ExperimentConfig:
    spec: str = field("", "a shipped spec's name (forethought experiment list) or a YAML file; also positional")
    root: str = field(".", "the folder holding runs/ and benchmarks/results/ (the repository for shipped specs)")
    seeds: list[int] | None = field(None, "run these seeds instead of the spec's (every run group)")
    only: list[str] | None = field(None, "run only the runs whose group or run name matches one of these "
                                         "shell-style patterns, e.g. ['arc-easy-*']")
    parallel: int | None = field(None, "runs at once (default: the spec's)")
    threads: int | None = field(None, "torch threads per run (default: the spec's)")
    launcher: str | None = field(None, "run each command with this instead of the spec's launcher, e.g. "
                                       "'accelerate launch --num_processes 8 -m forethought.cli'")
    dry_run: bool = field(False, "run: print the commands and check that they parse; run nothing")
    out: str = field("", "render: write the section to this file (default: print it)")

    def validate(self) -> None:
        for name in ("parallel", "threads"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ForethoughtError(f"{name} must be at least 1, got {v}")


@dataclass
class ListConfig:
    pass


def _command_line() -> str:
    return " ".join(["forethought", *(shlex.quote(a) for a in sys.argv[1:])])


def load_for(cfg: ExperimentConfig) -> tuple[ExperimentSpec, Path]:
    if not cfg.spec:
        raise ForethoughtError("name a spec: 'forethought experiment run <spec>' (see 'forethought experiment list')")
    spec, path = load_spec(cfg.spec)
    if cfg.seeds is not None:
        if not cfg.seeds:
            raise ForethoughtError("--seeds: give at least one seed")
        spec.seeds = list(cfg.seeds)
        for g in spec.runs:
            g.seeds = None
    spec.parallel = cfg.parallel or spec.parallel
    spec.threads = cfg.threads or spec.threads
    spec.launcher = spec.launcher if cfg.launcher is None else cfg.launcher
    return spec, path


def _layout(cfg: ExperimentConfig, spec: ExperimentSpec) -> Layout:
    return Layout.under(Path(cfg.root), spec.name)


def list_specs(cfg: ListConfig, resume: str | None = None) -> None:
    for path in shipped_specs():
        spec, _ = load_spec(str(path))
        n = len(plan(spec))
        print(f"{spec.name:<28} {spec.system:<8} {n:>3} runs  {spec.title}")
        if spec.cost:
            print(f"{'':<28} cost: {spec.cost}")


def run(cfg: ExperimentConfig, resume: str | None = None,
        parse: Callable[[tuple[str, ...]], None] | None = None) -> None:
    spec, path = load_for(cfg)
    layout = _layout(cfg, spec)
    from forethought.experiments.runner import check_commands
    from forethought.experiments.runner import run as run_spec

    planned = select(plan(spec, layout.runs), cfg.only)  # a pattern matching nothing: one line, nothing run
    if parse is not None:
        check_commands(planned, parse)
    if cfg.dry_run:  # what run would run: the runs without a current record
        from forethought.experiments.runner import current_run

        todo = [p for p in planned if current_run(spec, layout, p.run) is None]
        for p in todo:
            for argv in p.steps:
                print(" ".join(shlex.quote(a) for a in (*launcher(spec), *argv)))
        print(f"# {len(todo)} of {len(planned)} runs to run ({len(planned) - len(todo)} finished), {spec.parallel} at "
              f"a time, {spec.threads} thread(s) each; every command parses")
        return
    if spec.data:
        from forethought.core.env import data_root

        data_root()  # FORETHOUGHT_DATA missing: one line now, not a failed run later
    whole, _ = load_spec(cfg.spec)  # --seeds/--only run some runs; the results always collect the whole spec
    out = run_spec(spec, layout, _command_line(), progress=lambda m: print(m, flush=True), spec_file=path,
                   collect_as=whole, only=cfg.only)
    _summary(out)


def collect(cfg: ExperimentConfig, resume: str | None = None) -> None:
    spec, path = load_spec(cfg.spec) if cfg.spec else load_for(cfg)  # the whole spec: --seeds/--only pick what runs
    from forethought.experiments.runner import collect as collect_spec

    _summary(collect_spec(spec, _layout(cfg, spec), _command_line(), spec_file=path))


def _summary(out: dict) -> None:
    runs, unfinished = len(out["runs"]), len(out["unfinished"])
    print(f"{out['name']}: {runs} runs collected, {unfinished} unfinished")
    for name, c in out["checks"].items():
        state = "met" if c["passed"] else "MISSED" if c["passed"] is False else "not measured yet"
        print(f"  check {name}: {state} ({c['value']} = {c['observed']})")
