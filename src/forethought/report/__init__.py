"""The results pages of the docs, generated from ``benchmarks/results/*.json``.

``python -m forethought.report`` writes ``docs/results/<page>.md`` (each benchmark's tables, its plots beside
them and the papers' numbers beside ours) and the headline block of README.md; ``--check`` only compares. The
pages and their sections are listed in :mod:`forethought.report.pages`; the papers' numbers, with their
sources, in :mod:`forethought.report.papers`. This package reads JSON only: it imports no model code.
"""

from forethought.report.render import render_all, stale, write_all

__all__ = ["render_all", "stale", "write_all"]
