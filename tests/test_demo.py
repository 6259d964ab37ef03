"""``forethought demo`` replaces only run folders it created (they hold its marker file); anything else that
shares the name is refused through the real CLI, untouched."""

from __future__ import annotations

from pathlib import Path

from cli_harness import expect_clean_failure

from forethought.cli import main
from forethought.demo import MARKER

# No system: the demo then only writes its folder, marker and report (seconds), which is all these tests need.
NOTHING = ["--systems", "[]"]


def test_demo_replaces_its_own_folder(tmp_path: Path) -> None:
    assert main(["demo", "--run.out_dir", str(tmp_path), *NOTHING]) == 0
    folder = tmp_path / "demo"
    assert (folder / MARKER).is_file() and (folder / "report.md").is_file()
    (folder / "stale.txt").write_text("left by an earlier demo")
    assert main(["demo", "--run.out_dir", str(tmp_path), *NOTHING]) == 0
    assert not (folder / "stale.txt").exists(), "a rerun starts its own folder over"
    assert (folder / MARKER).is_file()
    (folder / "kept.txt").write_text("resumed demos keep what is there")
    assert main(["demo", "--run.out_dir", str(tmp_path), *NOTHING, "--resume", "auto"]) == 0
    assert (folder / "kept.txt").is_file()


def test_demo_refuses_a_folder_it_did_not_create(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "demo").mkdir(parents=True)
    (runs / "demo" / "env.json").write_text("{}")  # looks like a run, but no demo made it
    (runs / "demo" / "results.json").write_text('{"accuracy": 0.9}')
    for extra in ([], ["--resume", "auto"]):
        expect_clean_failure(["demo", "--run.out_dir", str(runs), *NOTHING, *extra], tmp_path, runs,
                             ["was not created by 'forethought demo'", MARKER])


def test_bad_system_keeps_the_previous_demo(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert main(["demo", "--run.out_dir", str(runs), *NOTHING]) == 0
    expect_clean_failure(["demo", "--run.out_dir", str(runs), "--systems", "[myopia, nope]"], tmp_path, runs,
                         ["config key 'systems'", "got 'nope'"], in_process=True)
