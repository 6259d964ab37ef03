"""benchmarks/psf_prompted.py at toy size: two recipe runs (unconditional and conditioned prior), then the
package's prompted evaluation (forethought.psf.prompted) of three methods and the true continuations."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_psf_prompted_tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    spec = importlib.util.spec_from_file_location("psf_prompted", ROOT / "benchmarks" / "psf_prompted.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)
    spec.loader.exec_module(bench)
    out = tmp_path / "out.json"
    res = bench.main(["--preset", "tiny", "--runs", str(tmp_path / "runs"), "--out", str(out), "--n-boot", "50"])
    assert json.loads(out.read_text())["over_seeds"] == json.loads(json.dumps(res["over_seeds"]))
    row = res["per_seed"]["0"]["prompted"]["1"]
    assert set(row) == {"true", "replace", "conditioned", "conditioned_no_replace", "differences"}
    assert set(row["differences"]) == {"true - replace", "conditioned - replace", "conditioned_no_replace - replace"}
    e = row["true"]["continuation_nll"]
    assert e["interval"][0] <= e["mean"] <= e["interval"][1]
    # the true continuations beat a toy model's: its NLL per token is lower, with an interval below zero
    d = row["differences"]["true - replace"]["continuation_nll"]
    assert d["diff"] < 0 and d["interval"][1] < 0
    with pytest.raises(SystemExit, match="prompt-blocks"):  # K = 4 blocks: m = 4 leaves nothing to continue
        bench.main(["--preset", "tiny", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "x.json"),
                    "--collect-only", "--prompt-blocks", "4"])
    assert not (tmp_path / "x.json").exists()
