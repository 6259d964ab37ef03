"""PNG plots with matplotlib (Agg backend: no display needed). Writes are atomic."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from forethought.core.io import atomic_write_bytes


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


def line_plot(series: dict[str, tuple[Sequence[float], Sequence[float]]], path: str | Path, *, title: str = "",
              xlabel: str = "", ylabel: str = "", logy: bool = False) -> Path:
    """One line per named (x, y) series."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, (x, y) in series.items():
        ax.plot(list(x), list(y), label=name, marker="." if len(x) < 40 else None)
    if logy:
        ax.set_yscale("log")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    return _save(fig, path)


def heatmaps(panels: dict[str, Sequence[Sequence[float]]], path: str | Path, *, title: str = "",
             xlabel: str = "", ylabel: str = "", vmin: float = 0.0, vmax: float = 1.0) -> Path:
    """Side-by-side heat maps sharing one colour scale (rows = y axis)."""
    plt = _plt()
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n + 0.8, 3.4), squeeze=False)
    im = None
    for ax, (name, grid) in zip(axes[0], panels.items()):
        im = ax.imshow(grid, aspect="auto", origin="lower", vmin=vmin, vmax=vmax, cmap="viridis")
        ax.set(title=name, xlabel=xlabel, ylabel=ylabel)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.9)
    if title:
        fig.suptitle(title)
    return _save(fig, path)
