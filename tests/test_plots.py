"""core.plots draws on standalone matplotlib Figures: it never imports pyplot or switches the backend of the
process that uses forethought, and its PNGs are real images."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
import matplotlib
matplotlib.use("svg")  # the user's own choice, which forethought must leave alone
from forethought.core import plots
out = sys.argv[1]
plots.line_plot({"a": ([0, 1, 2], [1.0, 0.5, 0.2]), "b": ([0, 1, 2], [1.0, 0.7, 0.6])}, out + "/line.png", logy=True)
plots.heatmaps({"van": [[0.1, 0.2], [0.3, 0.4]], "myo": [[0.0, 0.1], [0.2, 0.3]]}, out + "/heat.png", title="t")
plots.bar_plot({"x": (0.8, 0.01), "y": (0.9, 0.02)}, out + "/bar.png", reference={"x": 0.85}, hline=0.95)
fig, axes = plots.pyplot().subplots(1, 2, figsize=(4, 2), squeeze=False, layout="constrained")  # older callers
axes[0][0].plot([0, 1])
plots.save_figure(fig, out + "/old.png")
print(matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules)
"""


def test_plots_leave_the_backend_alone(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["svg", "False"]
    for name in ("line", "heat", "bar", "old"):
        data = (tmp_path / f"{name}.png").read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 1000
