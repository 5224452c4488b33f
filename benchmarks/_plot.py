"""One chart shape for every benchmark: grouped horizontal bars, one row per contender.

Each script's ``--plot PATH`` draws its own results with :func:`bars`, so the figures in
``docs/benchmarks.md`` come from the same run as its tables (matplotlib, from the
``bench`` extra).
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence


def bars(path: str, rows: Sequence[str], series: Dict[str, Sequence[Optional[float]]], *, title: str,
         xlabel: str, log: bool = False, highlight: str = "nbmp") -> None:
    """Save a chart of ``series`` (label -> one value per row; None = not measured) to ``path``.

    Rows whose name contains ``highlight`` are labelled in bold: nbmp's own rows.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height = 0.8 / max(len(series), 1)
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.42 * len(rows) * max(1, len(series) * 0.6)))
    for k, (label, values) in enumerate(series.items()):
        ys = [v if v is not None else 0 for v in values]
        ax.barh([i + k * height for i in range(len(rows))], ys, height=height, label=label)
    ax.set_yticks([i + height * (len(series) - 1) / 2 for i in range(len(rows))])
    ax.set_yticklabels([r.replace("**", "") for r in rows], fontsize=8)
    for tick, row in zip(ax.get_yticklabels(), rows):
        if highlight in row:
            tick.set_fontweight("bold")
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.invert_yaxis()
    if len(series) > 1:
        ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
