"""The experiment runner end to end on one tiny spec (two real runs through the CLI), and spec checking."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forethought.cli import check_command, main
from forethought.core.errors import ForethoughtError
from forethought.experiments.runner import Layout, check_commands, collect, launcher, lookup
from forethought.experiments.spec import load_spec, plan, shipped_specs

TINY = """
name: tiny
title: Tiny synthetic
system: myopia
description: Two seeds of the tiny synthetic task, vanilla and myopic in one run.
cost: seconds
seeds: [0, 1]
parallel: 2
runs:
  - name: synth
    steps:
      - myopia synthetic --config tiny --train.steps 3 --eval_sequences 32 --probe.train_sequences 32
        --probe.test_sequences 16 --run.seed {seed} --run.out_dir {out_dir} --run.name {run} --resume auto
measures:
  vanilla: results.p=1.vanilla.normalised_loss
  myopic: results.p=1.detach_hidden.normalised_loss
comparisons: []
checks:
  - {name: vanilla below 10, value: groups.synth.vanilla.mean, op: "<", threshold: 10}
"""


def _spec(tmp_path: Path, text: str = TINY, name: str = "tiny") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def _archived(tmp_path: Path, spec_text: str, records: dict[str, dict]) -> tuple:
    """(spec, spec file, layout) of ``spec_text`` with ``records`` ({run: record}) in its archive, none run."""
    spec, path = load_spec(str(_spec(tmp_path, spec_text)))
    layout = Layout.under(tmp_path, "tiny")
    layout.archive.mkdir(parents=True, exist_ok=True)
    for run, rec in records.items():
        (layout.archive / f"{run}.json").write_text(json.dumps({"command": "x", "started": 0.0, "finished": 1.0,
                                                                 **rec}))
    return spec, path, layout


def test_run_resume_collect_from_archive_render(tmp_path, capsys) -> None:
    path = _spec(tmp_path)
    root = tmp_path / "root"
    assert main(["experiment", "run", str(path), "--root", str(root)]) == 0
    layout = Layout.under(root, "tiny")
    out = json.loads(layout.results.read_text())
    assert out["schema"] == "forethought.experiment/1" and sorted(out["runs"]) == ["synth-s0", "synth-s1"]
    for name, r in out["runs"].items():  # each run's measures are its own results.json's numbers
        res = json.loads((layout.runs / name / "results.json").read_text())
        assert r["measures"]["vanilla"] == res["p=1"]["vanilla"]["normalised_loss"]
    stats = out["groups"]["synth"]["measures"]["vanilla"]
    assert stats["seeds"] == [0, 1] and stats["ci95_low"] < stats["mean"] < stats["ci95_high"]
    assert out["checks"]["vanilla below 10"]["passed"] is True
    assert out["provenance"]["commits"] or out["provenance"]["machines"]
    assert sorted(p.name for p in layout.archive.glob("*.json")) == ["synth-s0.json", "synth-s1.json"]
    capsys.readouterr()
    # resume: everything finished, nothing runs again
    assert main(["experiment", "run", str(path), "--root", str(root)]) == 0
    assert "2 of 2 runs finished; running 0" in capsys.readouterr().out
    # a fresh machine: the archive alone gives the same numbers
    first = {k: out[k] for k in ("runs", "groups", "comparisons", "checks")}
    shutil.rmtree(layout.runs)
    layout.results.unlink()
    assert main(["experiment", "collect", str(path), "--root", str(root)]) == 0
    again = json.loads(layout.results.read_text())
    assert {k: again[k] for k in first} == first
    assert main(["experiment", "render", str(path), "--root", str(root), "--out", str(tmp_path / "s.md")]) == 0
    text = (tmp_path / "s.md").read_text()
    assert text.startswith("## Tiny synthetic") and "| synth |" in text and "**met**" in text


def test_comparisons_and_checks_from_records(tmp_path) -> None:
    """collect on hand-made archived records: the seed-paired difference and a failing check."""
    spec_text = TINY.replace("comparisons: []", "comparisons:\n  - {name: gap, measure: vanilla, a: b, b: a}").replace(
        "  - name: synth\n", "  - name: '{arm}'\n    grid: {arm: [a, b]}\n").replace(
        "groups.synth.vanilla.mean", "comparisons.gap.mean")
    values = {"a-s0": 1.0, "a-s1": 2.0, "b-s0": 13.0, "b-s1": 12.5}
    spec, path, layout = _archived(tmp_path, spec_text, {
        run: {"results": {"p=1": {"vanilla": {"normalised_loss": v}, "detach_hidden": {"normalised_loss": 0}}}}
        for run, v in values.items()})
    out = collect(spec, layout, "test", spec_file=path)
    gap = out["comparisons"]["gap"]
    assert gap["per_seed"] == [12.0, 10.5] and gap["mean"] == pytest.approx(11.25)
    assert out["checks"]["vanilla below 10"]["passed"] is False
    assert out["provenance"]["runs_without_env"] == sorted(values)


def test_partial_collect_lists_measures_not_measured_yet(tmp_path) -> None:
    """A measure only unfinished runs would hold is listed, not an error; once every run has finished, a measure
    no record holds is a wrong path in the spec."""
    spec_text = TINY.replace("  - name: synth\n", "  - name: '{arm}'\n    grid: {arm: [a, b]}\n").replace(
        "groups.synth.vanilla.mean", "groups.a.vanilla.mean").replace(
        "  myopic: results.p=1.detach_hidden.normalised_loss", "  only_b: results.b_only")
    a_only = {"results": {"p=1": {"vanilla": {"normalised_loss": 1.0}}}}
    spec, path, layout = _archived(tmp_path, spec_text, {"a-s0": a_only, "a-s1": a_only})
    out = collect(spec, layout, "test", spec_file=path)
    assert out["not_measured_yet"] == ["only_b"] and sorted(out["unfinished"]) == ["b-s0", "b-s1"]
    _archived(tmp_path, spec_text, {"b-s0": a_only, "b-s1": a_only})  # b's records lack it too: the spec is wrong
    with pytest.raises(ForethoughtError, match=r"measure\(s\) 'only_b' \(results.b_only\) found in no finished"):
        collect(spec, layout, "test", spec_file=path)


@pytest.mark.parametrize("edit, message", [
    (("seeds: [0, 1]", "seeds: [0, 1]\nseedz: [2]"), "unknown config key 'seedz' (did you mean 'seeds'?)"),
    (("--run.name {run}", "--run.name {rn}"), "unknown placeholder(s) {rn}"),
    (("parallel: 2", "parallel: 0"), "parallel must be at least 1"),
    (("value: groups.synth.vanilla.mean", "value: groups.synth.nope.mean"), "measure 'nope' is not defined"),
    (("comparisons: []", "comparisons: [{name: g, measure: vanilla, a: synth, b: other}]"), "b 'other' is not"),
    (("system: myopia", "system: myopa"), "did you mean 'myopia'"),
    (("comparisons: []", "comparisons: []\nretrain: {synth-s7: '2026-01-01 00:00'}"), "retrain: run 'synth-s7' is not"),
    (("comparisons: []", "comparisons: []\nretrain: {synth-s0: 'yesterday'}"), "give the time as 'YYYY-MM-DD HH:MM'"),
    (("comparisons: []", "comparisons: []\nplots: [{file: c.png, draw: 'os:system'}]"), "draw must name 'forethought"),
    (("comparisons: []", "comparisons: []\nplots: [{file: c.png, measure: nope}]"), "measure 'nope' is not defined"),
])
def test_bad_specs_fail_in_one_line(tmp_path, edit, message) -> None:
    path = _spec(tmp_path, TINY.replace(*edit))
    with pytest.raises(ForethoughtError, match="spec .*tiny.yaml: ") as e:
        load_spec(str(path))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_bad_spec_through_the_cli_writes_nothing(tmp_path, capsys) -> None:
    path = _spec(tmp_path, TINY.replace("--run.name {run}", "--run.nam {run}"))
    assert main(["experiment", "run", str(path), "--root", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "run synth-s0" in err and "unknown config key 'run.nam'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
    assert main(["experiment", "run", "no_such_spec"]) == 2


def test_plan_fills_placeholders_seed_major(tmp_path) -> None:
    text = TINY.replace("  - name: synth\n", "  - name: 'x-{arm}'\n    grid: {arm: [a, b]}\n").replace(
        "groups.synth", "groups.x-a")
    spec, _ = load_spec(str(_spec(tmp_path, text)))
    runs = plan(spec, Path("/out"))
    assert [p.run for p in runs] == ["x-a-s0", "x-b-s0", "x-a-s1", "x-b-s1"]
    argv = runs[1].steps[0]
    assert argv[argv.index("--run.name") + 1] == "x-b-s0" and argv[argv.index("--run.out_dir") + 1] == "/out"
    assert lookup({"a": [{"b": 1}]}, "a.0.b") == 1


def test_only_picks_runs_by_group_or_run_pattern(tmp_path, capsys) -> None:
    text = TINY.replace("  - name: synth\n", "  - name: 'x-{arm}'\n    grid: {arm: [a, b]}\n").replace(
        "groups.synth", "groups.x-a")
    path, root = _spec(tmp_path, text), tmp_path / "root"
    assert main(["experiment", "run", str(path), "--root", str(root), "--dry_run", "true",
                 "--only", "[x-b, x-a-s1]"]) == 0
    out = capsys.readouterr().out
    assert [w for w in out.split() if w.startswith("x-")] == ["x-b-s0", "x-a-s1", "x-b-s1"]
    assert "# 3 of 3 runs to run" in out
    assert main(["experiment", "run", str(path), "--root", str(root), "--only", "[x-c*]"]) == 2
    err = capsys.readouterr().err
    assert "'x-c*' matches no run (the groups: x-a, x-b)" in err and len(err.strip().splitlines()) == 1
    assert not root.exists()


def test_check_command_rejects_what_the_cli_rejects() -> None:
    check_command(("myopia", "synthetic", "--config", "tiny", "--train.steps", "3"))
    with pytest.raises(ForethoughtError, match="unknown config key 'train.stepz'"):
        check_command(("myopia", "synthetic", "--train.stepz", "3"))
    with pytest.raises(ForethoughtError, match="cannot run inside an experiment"):
        check_command(("experiment", "run", "x"))


@pytest.mark.parametrize("path", shipped_specs(), ids=lambda p: p.stem)
def test_every_shipped_spec_loads_and_its_commands_parse(path: Path) -> None:
    """What `forethought experiment run <name> --dry_run true` checks: the spec is valid and every command of every
    run loads its config as the CLI would (a renamed key or preset fails here, not hours into a run)."""
    spec, _ = load_spec(path.stem)
    assert spec.description and spec.cost, "a shipped spec says what it measures and what it costs"
    planned = plan(spec, Path("runs") / spec.name)
    assert planned
    check_commands(planned, check_command)


def test_launcher_replaces_the_interpreter(tmp_path) -> None:
    spec, _ = load_spec(str(_spec(tmp_path, TINY.replace("parallel: 2", "parallel: 2\nlauncher: accelerate launch "
                                                                       "--num_processes 2 -m forethought.cli"))))
    assert launcher(spec) == ("accelerate", "launch", "--num_processes", "2", "-m", "forethought.cli")


def test_stages_order_runs_and_measures_fill_placeholders(tmp_path) -> None:
    text = TINY.replace("  - name: synth\n",
                        "  - name: first\n    stage: 0\n    steps: [myopia synthetic --config tiny]\n"
                        "  - name: 'p{p}'\n    stage: 1\n    grid: {p: ['0.3', '1']}\n").replace(
        "  vanilla: results.p=1.vanilla.normalised_loss", "  vanilla: results.p={p}.vanilla.normalised_loss").replace(
        "groups.synth.vanilla.mean", "groups.p1.vanilla.mean")
    spec, _ = load_spec(str(_spec(tmp_path, text)))
    runs = plan(spec)
    assert [p.run for p in runs] == ["first-s0", "first-s1", "p0.3-s0", "p1-s0", "p0.3-s1", "p1-s1"]
    assert runs[2].measure_path(spec.measures["vanilla"]) == "results.p=0.3.vanilla.normalised_loss"
    assert runs[0].measure_path(spec.measures["vanilla"]) is None  # the first group has no p
    # a key holding dots is found whole
    assert lookup({"results": {"p=0.3": {"vanilla": {"normalised_loss": 1.5}}}},
                  "results.p=0.3.vanilla.normalised_loss") == 1.5
    with pytest.raises(ForethoughtError, match=r"measures.vanilla: unknown placeholder\(s\) \{q\}"):
        load_spec(str(_spec(tmp_path, text.replace("p={p}.vanilla", "p={q}.vanilla"))))


def test_retrain_reruns_a_stale_record_and_collect_leaves_it_out(tmp_path, capsys) -> None:
    path = _spec(tmp_path, TINY.replace("comparisons: []", "comparisons: []\nretrain: {synth-s0: '2021-01-01 00:00'}"))
    spec, _ = load_spec(str(path))
    layout = Layout.under(tmp_path / "root", "tiny")
    layout.archive.mkdir(parents=True)
    for seed, started in ((0, 1.5e9), (1, 1.7e9)):  # 2017 (before the retrain time) and 2023
        row = {"normalised_loss": 1.0 + seed, "probe_r2": [[0.0]]}
        record = {"results": {"p=1": {"vanilla": row, "detach_hidden": row}}, "started": started,
                  "finished": started + 1, "command": "forethought myopia synthetic"}
        (layout.archive / f"synth-s{seed}.json").write_text(json.dumps(record))
    assert main(["experiment", "run", str(path), "--root", str(tmp_path / "root"), "--dry_run", "true"]) == 0
    out = capsys.readouterr().out
    assert "--run.name synth-s0" in out and "--run.name synth-s1" not in out and "# 1 of 2 runs to run" in out
    collected = collect(spec, layout, "pytest")
    assert collected["unfinished"] == ["synth-s0"] and list(collected["runs"]) == ["synth-s1"]
