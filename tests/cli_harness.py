"""Drive the real ``forethought`` console script in a subprocess and check how it fails on bad input.

``expect_clean_failure`` asserts what every bad input must give: exit status 2, exactly one line on stderr
that names the problem, no traceback, and no new, changed or removed files under the watched folder.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

# Tracebacks print this header; warnings from libraries would add lines too, so they are silenced.
_TRACEBACK = "Traceback (most recent call last)"


def snapshot(folder: Path) -> dict[str, str]:
    """Path -> SHA-256 of every file under ``folder`` (empty when it does not exist)."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def cli(args: list[str], cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m forethought.cli ARGS`` (the console script's entry point) in ``cwd``."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false",
                "TQDM_DISABLE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "forethought.cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def expect_clean_failure(args: list[str], cwd: Path, watch: Path, names: list[str],
                         env: dict[str, str] | None = None) -> str:
    """Run the CLI on a bad input; assert exit 2, one stderr line containing every string in ``names``
    (case-insensitive), no traceback, and ``watch`` left exactly as it was. Returns the line."""
    before = snapshot(watch)
    out = cli(args, cwd, env)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2, (out.returncode, out.stderr[-3000:])
    assert _TRACEBACK not in out.stderr, out.stderr[-3000:]
    assert len(lines) == 1, out.stderr[-3000:]
    assert lines[0].startswith("forethought: error: "), lines
    for name in names:
        assert name.lower() in lines[0].lower(), (name, lines[0])
    assert snapshot(watch) == before, "the run folder changed"
    return lines[0]
