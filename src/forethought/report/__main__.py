"""``python -m forethought.report [--check] [--root DIR]``: render docs/results/*.md and README's headline block
from benchmarks/results/*.json (``--check``: write nothing, exit 1 when a committed file is out of date)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from forethought.core.errors import ForethoughtError
from forethought.report.render import stale, write_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forethought.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="the repository root (default: the current folder)")
    parser.add_argument("--check", action="store_true", help="only check that the committed pages are current")
    args = parser.parse_args(argv)
    try:
        if args.check:
            old = stale(Path(args.root))
            for rel in old:
                print(f"out of date: {rel} (run python -m forethought.report)", file=sys.stderr)
            return 1 if old else 0
        for rel in write_all(Path(args.root)):
            print(f"wrote {rel}")
        return 0
    except ForethoughtError as e:
        print(f"forethought.report: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
