"""forethought.psf.arms: an arm's recipe and diagnose commands run once each, resumably, with their wall times
recorded; a failure is one line naming the log."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from forethought.psf import arms


def fake(run_dir: Path, name: str) -> list[str]:
    """A stand-in command that appends a line to <run_dir>/calls and writes <run_dir>/<name>."""
    code = (f"from pathlib import Path; d = Path({str(run_dir)!r}); d.mkdir(exist_ok=True); "
            f"open(d / 'calls', 'a').write({name!r} + '\\n'); (d / {name!r}).write_text('{{}}')")
    return [sys.executable, "-c", code]


def test_an_arm_trains_and_diagnoses_once(tmp_path):
    run_dir, logs = tmp_path / "a-s0", tmp_path / "logs"
    arm = arms.Arm(run_dir, fake(run_dir, "results.json"), fake(run_dir, "diagnose.json"))
    assert arms.read_arm(arm, logs) is None
    collected = arms.run_arms(["a"], ["a", "b"], lambda a: arms.train_and_diagnose(arm, logs, os.environ, tmp_path),
                              lambda a: arms.read_arm(arm, logs) if a == "a" else None)
    assert list(collected) == ["a"]
    res, diag, walls = collected["a"]
    assert res == diag == {} and set(walls) == {"recipe_s", "diagnose_s"}
    assert (run_dir / "calls").read_text().split() == ["results.json", "diagnose.json"]
    assert "$ " in (logs / "a-s0.log").read_text()
    arms.train_and_diagnose(arm, logs, os.environ, tmp_path)  # finished and current: nothing runs
    assert (run_dir / "calls").read_text().split() == ["results.json", "diagnose.json"]
    time.sleep(0.02)
    (run_dir / "results.json").write_text("{}")  # retrained after its diagnosis: diagnosed again, not retrained
    arms.train_and_diagnose(arm, logs, os.environ, tmp_path)
    assert (run_dir / "calls").read_text().split() == ["results.json", "diagnose.json", "diagnose.json"]
    arm.walls_path(logs).unlink()  # retrain_unrecorded: a finished recipe without a recorded wall runs again
    time.sleep(0.02)
    arms.train_and_diagnose(arm, logs, os.environ, tmp_path, retrain_unrecorded=True)
    assert (run_dir / "calls").read_text().split()[3:] == ["results.json", "diagnose.json"]
    assert set(arms.read_walls(arm, logs)) == {"recipe_s", "diagnose_s"}


def test_a_failing_command_ends_with_one_line(tmp_path):
    arm = arms.Arm(tmp_path / "x", [sys.executable, "-c", "raise SystemExit(3)"], [])
    with pytest.raises(SystemExit, match=r"failed \(exit 3\); see .*x\.log"):
        arms.train_and_diagnose(arm, tmp_path / "logs", os.environ, tmp_path)


def test_unknown_arms_are_refused(capsys):
    p = arms.arm_parser("bench", ["a", "b"], Path("runs"), Path("out.json"))
    assert arms.parse_arm_args(p, ["a", "b"], ["--arms", "b"]).arms == ["b"]
    with pytest.raises(SystemExit) as e:
        arms.parse_arm_args(p, ["a", "b"], ["--arms", "c"])
    assert e.value.code == 2 and "unknown arm(s) ['c']" in capsys.readouterr().err
    assert arms.command_line([sys.executable, "-m", "forethought.cli", "/r/x/y"], Path("/r")) == \
        "python -m forethought.cli x/y"
