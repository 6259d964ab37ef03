"""PNG plots through matplotlib's object API: each plot is its own ``matplotlib.figure.Figure``, so nothing here
touches pyplot's global state or switches the backend of the process that imports forethought (a notebook's
inline backend keeps working). Writes are atomic."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from forethought.core.io import atomic_write_bytes

# Figure(...) keywords; everything else given to subplots() goes to Figure.subplots (nrows, ncols, squeeze, ...).
_FIGURE_KEYS = ("figsize", "dpi", "layout", "facecolor", "edgecolor", "frameon", "tight_layout",
                "constrained_layout")


def subplots(nrows: int = 1, ncols: int = 1, **kwargs: Any) -> tuple[Any, Any]:
    """Like ``pyplot.subplots`` but on a standalone Figure (imported on first use: matplotlib is slow to import).
    Figures made here need no closing: nothing global holds them."""
    from matplotlib.figure import Figure

    fig = Figure(**{k: kwargs.pop(k) for k in _FIGURE_KEYS if k in kwargs})
    return fig, fig.subplots(nrows, ncols, **kwargs)


def pyplot() -> SimpleNamespace:
    """Older callers' entry point: ``pyplot().subplots(...)`` and ``pyplot().close(fig)`` now build and drop
    standalone Figures (see :func:`subplots`); prefer calling :func:`subplots` directly."""
    return SimpleNamespace(subplots=subplots, close=lambda fig=None: None)


def save_figure(fig: Any, path: str | Path) -> Path:
    """Write a figure as PNG atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


def line_plot(series: dict[str, tuple[Sequence[float], Sequence[float]]], path: str | Path, *, title: str = "",
              xlabel: str = "", ylabel: str = "", logy: bool = False) -> Path:
    """One line per named (x, y) series."""
    fig, ax = subplots(figsize=(6.4, 4.0))
    for name, (x, y) in series.items():
        ax.plot(list(x), list(y), label=name, marker="." if len(x) < 40 else None)
    if logy:
        ax.set_yscale("log")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    return save_figure(fig, path)


def heatmaps(panels: dict[str, Sequence[Sequence[float]]], path: str | Path, *, title: str = "",
             xlabel: str = "", ylabel: str = "", vmin: float = 0.0, vmax: float = 1.0) -> Path:
    """Side-by-side heat maps sharing one colour scale (rows = y axis)."""
    n = len(panels)
    fig, axes = subplots(1, n, figsize=(4.2 * n + 0.8, 3.4), squeeze=False)
    im = None
    for ax, (name, grid) in zip(axes[0], panels.items(), strict=True):
        im = ax.imshow(grid, aspect="auto", origin="lower", vmin=vmin, vmax=vmax, cmap="viridis")
        ax.set(title=name, xlabel=xlabel, ylabel=ylabel)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.9)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


def bar_plot(bars: dict[str, tuple[float, float]], path: str | Path, *, title: str = "", ylabel: str = "",
             reference: dict[str, float] | None = None, hline: float | None = None, hline_label: str = "") -> Path:
    """Bars with error bars: name -> (value, error). ``reference`` marks a value per bar (e.g. a published
    number); ``hline`` draws one horizontal line (e.g. an upper bound)."""
    fig, ax = subplots(figsize=(1.4 * len(bars) + 2.5, 4.0))
    names = list(bars)
    ax.bar(names, [bars[n][0] for n in names], yerr=[bars[n][1] for n in names], capsize=4, color="#4C72B0")
    if max(map(len, names), default=0) > 12:  # long names (e.g. a spec's run groups) would overlap: slant them
        ax.tick_params(axis="x", labelrotation=20)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    if reference:
        xs = [i for i, n in enumerate(names) if n in reference]
        ax.scatter(xs, [reference[names[i]] for i in xs], marker="_", s=600, color="black", zorder=3,
                   label="reference")
        ax.legend()
    if hline is not None:
        ax.axhline(hline, ls="--", color="gray", label=hline_label)
        ax.legend()
    values = [bars[n][0] for n in names] + list((reference or {}).values())
    low = min(values) if values else 0.0
    if low > 0.5:
        ax.set_ylim(low - 0.1, min(1.0, max(values) + 0.05) if max(values) <= 1 else None)
    ax.set(title=title, ylabel=ylabel)
    if max(map(len, names), default=0) > 12:  # long run-group names would overlap under their bars
        ax.tick_params(axis="x", labelrotation=30)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, path)
