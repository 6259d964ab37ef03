"""``forethought config show|validate``, ``--resume`` checked with the config, and ``--help`` wrapped and grouped
by section: all in this process (nothing here gets past loading a config)."""

from __future__ import annotations

import sys
from pathlib import Path
from unittest import mock

import pytest
from cli_harness import GotPastConfig, cli_in_process, expect_clean_failure

from forethought import cli
from forethought.core import config as config_module


def _tiny(cmd: cli.Command) -> Path | None:
    try:
        return cli.resolve_config_path(cmd.system, cmd.verb or "demo", "tiny")
    except config_module.ForethoughtError:
        return None


@pytest.mark.parametrize("cmd", cli.COMMANDS, ids=lambda c: f"{c.system} {c.verb}".strip())
def test_show_loads_back_as_the_same_config(cmd: cli.Command, tmp_path: Path) -> None:
    """Every command's shown config (its tiny preset where it has one) is a --config file giving the same config.
    The sections' validate() is skipped: some commands need a run folder that the round trip does not."""
    cls = cmd.config_class()
    with mock.patch.object(config_module, "validate_all"):
        cfg = config_module.load_config(cls, _tiny(cmd))
        (tmp_path / "shown.yaml").write_text(config_module.show_yaml(cfg))
        assert config_module.load_config(cls, tmp_path / "shown.yaml") == cfg


def test_show_through_the_cli_keeps_overrides_and_comments(tmp_path: Path) -> None:
    args = ["predgen", "train", "--config", "tiny", "--task.template", r"Q: {text}\nA:", "--task.labels", "[no, yes]",
            "--train.lr", "3e-4", "--predgen.p_end", "0.25", "--task.max_eval_examples", "7"]
    out = cli_in_process(["config", "show", *args], tmp_path)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    shown = tmp_path / "shown.yaml"
    shown.write_text(out.stdout)
    expected = cli._configured(args)[1]
    assert config_module.load_config(type(expected), shown) == expected
    assert expected.task.template == "Q: {text}\nA:" and expected.task.labels == ["no", "yes"]
    lines = out.stdout.splitlines()
    assert lines[0] == "# the resolved config of: forethought predgen train --config tiny" \
        r" --task.template 'Q: {text}\nA:'" \
        " --task.labels '[no, yes]' --train.lr 3e-4 --predgen.p_end 0.25 --task.max_eval_examples 7"
    # each key: a comment with its type, the command's default and its help, then the resolved value
    i = lines.index("  lr: 0.0003")
    assert lines[i - 1].startswith("  # float, default ") and "learning rate" in lines[i - 1].lower()
    method = lines.index("method: predgen")
    assert lines[method - 2].startswith("# predictor | generator | predgen | base, default predgen: ")
    assert "train:" in lines and all(len(line) <= 100 for line in lines[1:])


def test_validate_loads_nothing(tmp_path: Path) -> None:
    """validate and show import no torch, numpy or transformers (an import of one fails here) and load only the
    command's config class, never the module that runs it."""
    loaded: list[str] = []
    real_load = cli._load

    def spy(target: str):
        loaded.append(target)
        return real_load(target)

    heavy = ("torch", "numpy", "transformers", "peft", "accelerate")
    saved = {name: sys.modules.get(name) for name in heavy}
    # None in sys.modules makes `import torch` fail; only these keys are restored afterwards (patch.dict would
    # also drop every module first imported inside, leaving two copies of their classes)
    sys.modules.update(dict.fromkeys(heavy))
    try:
        with mock.patch.object(cli, "_load", spy):
            ok = cli_in_process(["config", "validate", "psf", "recipe", "--config", "tiny", "--resume", "auto"],
                                tmp_path)
            shown = cli_in_process(["config", "show", "myopia", "lm", "--config", "tiny"], tmp_path)
    finally:
        for name, module in saved.items():
            if module is None:
                del sys.modules[name]
            else:
                sys.modules[name] = module
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "OK: the config of 'forethought psf recipe' is valid\n", "")
    assert shown.returncode == 0 and "gpt:" in shown.stdout.splitlines()
    assert loaded and all(t in {c.config for c in cli.COMMANDS} for t in loaded), loaded
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args,names", [
    (["config", "validate", "predgen", "train", "--trian.steps", "3"], ["unknown config key 'trian.steps'"]),
    (["config", "show", "myopia", "synthetic", "--train.steps", "-5"], ["steps must not be negative"]),
    (["config", "validate", "predgen", "train", "--resume", "yes"], ["--resume", "no checkpoint folder at yes"]),
    (["config", "shw", "predgen", "train"], ["unknown command 'config shw'", "show, validate"]),
    (["config", "validate"], ["name a command"]),
    # --resume is checked with the config, before any data or model loads
    (["predgen", "train", "--config", "tiny", "--resume", "yes"], ["no checkpoint folder at yes", "'auto'"]),
    (["myopia", "gradients", "--config", "tiny", "--resume", "."], ["is not a checkpoint", "manifest.json"]),
    (["psf", "recipe", "--config", "tiny", "--resume", "runs/x/step-000002"], ["takes --resume auto"]),
    (["myopia", "lm", "--config", "tiny", "--resume", "runs"], ["takes --resume auto"]),
    (["psf", "eval", "--recipe_run", "x", "--resume", "auto"], ["'psf eval' takes no --resume"]),
    (["experiment", "collect", "predgen_paper_grid", "--resume=auto"], ["'experiment collect' takes no --resume"]),
])
def test_bad_config_and_resume_are_one_line(tmp_path: Path, args: list[str], names: list[str]) -> None:
    runs = tmp_path / "runs"
    expect_clean_failure(args, tmp_path, runs, names, in_process=True)


def test_accepted_resume_values(tmp_path: Path) -> None:
    train = next(c for c in cli.COMMANDS if (c.system, c.verb) == ("predgen", "train"))
    assert [cli.check_resume(train, v) for v in (None, "", "none", "never", "auto")] == [None] * 4 + ["auto"]
    step = tmp_path / "step-000002"
    step.mkdir()
    (step / "manifest.json").write_text("{}")
    with pytest.raises(GotPastConfig):  # a checkpoint folder passes; the run itself verifies its files
        cli_in_process(["predgen", "train", "--config", "tiny", "--resume", str(step)], tmp_path)


def test_help_is_wrapped_and_grouped_by_section(tmp_path: Path) -> None:
    for columns, width in (("72", 72), ("300", 100)):
        out = cli_in_process(["psf", "recipe", "--help"], tmp_path, env={"COLUMNS": columns})
        assert out.returncode == 0
        lines = out.stdout.splitlines()
        assert max(len(line) for line in lines) <= width
        # each key sits under its section's heading
        headings = [i for i, line in enumerate(lines) if line and not line.startswith(" ") and ":" in line]
        heading = {lines[i].split(":")[0]: i for i in headings}
        assert {"settings", "model", "base.train", "prior.model"} <= set(heading)
        key = next(i for i, line in enumerate(lines) if line.startswith("  --prior.model.n_layer "))
        assert max(i for i in headings if i < key) == heading["prior.model"]
    top = cli_in_process(["--help"], tmp_path, env={"COLUMNS": "80"})
    assert max(len(line) for line in top.stdout.splitlines()) <= 100 and "config validate" in top.stdout
