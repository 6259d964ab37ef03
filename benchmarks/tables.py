"""Print every results page (markdown) from the committed ``benchmarks/results/*.json``; the rendering lives in
``forethought.report``, which also writes the pages to docs/results/ (``python -m forethought.report``).

    python benchmarks/tables.py
"""

from __future__ import annotations

from pathlib import Path

from forethought.report.pages import PAGES
from forethought.report.render import render_page

if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    for page in PAGES:
        print(render_page(root, page))
