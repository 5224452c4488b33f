"""Small inline SVG plots as strings: sparklines of a series and a Pool's task timeline.

Pure functions: the same markup goes into the widget, the snapshot and a saved HTML file.
Coordinates are rounded to one decimal to keep what is sent a few times a second small.
"""

from __future__ import annotations

import base64
import re
from html import escape
from typing import Dict, List, Optional, Sequence

from ._history import WorkerSpans

__all__ = ["sparkline", "timeline", "legend", "as_images", "OUTCOME_COLORS"]

OUTCOME_COLORS = {"ok": "#43a047", "raised": "#e53935", "lost": "#8e24aa"}
_ROW, _GAP, _LABEL = 12, 3, 28  # timeline: row height, gap between rows, label width (px)


def sparkline(values: Sequence[float], *, width: int = 90, height: int = 18, top: Optional[float] = None,
              bottom: float = 0.0, color: str = "#1565c0", title: str = "", kind: str = "") -> str:
    """A line of ``values`` (left to right, evenly spaced) from ``bottom`` up to ``top``
    (default: their maximum), filled below; an empty frame of the same size when there
    are none."""
    attrs = (f"xmlns='{_NS}' class='nbmp-spark{' nbmp-spark-' + kind if kind else ''}' width='{width}' height='{height}' "
             f"viewBox='0 0 {width} {height}' data-points='{len(values)}' style='vertical-align:middle'")
    tip = f"<title>{escape(title)}</title>" if title else ""
    if not values:
        return f"<svg {attrs}>{tip}<rect width='{width}' height='{height}' fill='#f5f5f5'/></svg>"
    low = min(bottom, *values)
    span = (max(top if top is not None else low, max(values)) - low) or 1.0
    step = (width - 1) / max(1, len(values) - 1)
    ys = [_r(height - 1 - (height - 2) * (v - low) / span) for v in values]
    xs = [_r(i * step) for i in range(len(values))] if len(values) > 1 else [0.0, float(width - 1)]
    ys = ys if len(values) > 1 else ys * 2
    line = " ".join(f"{x},{y}" for x, y in zip(xs, ys))
    area = f"0,{height} {line} {xs[-1]},{height}"
    return (f"<svg {attrs}>{tip}<rect width='{width}' height='{height}' fill='#f5f5f5'/>"
            f"<polygon points='{area}' fill='{color}' fill-opacity='0.18'/>"
            f"<polyline points='{line}' fill='none' stroke='{color}' stroke-width='1.2'/></svg>")


def timeline(spans: Dict[int, WorkerSpans], workers: Sequence[int], start: float, end: float,
             width: int = 600) -> str:
    """One row per worker, a bar per task span (coloured by outcome) over ``start``..``end``."""
    rows = list(workers)
    height = len(rows) * (_ROW + _GAP) + 14
    scale = (width - _LABEL - 4) / max(end - start, 1e-9)
    parts: List[str] = []
    for n, index in enumerate(rows):
        y = n * (_ROW + _GAP)
        parts.append(f"<text x='0' y='{y + _ROW - 2}' font-size='10' fill='#555'>w{index}</text>"
                     f"<rect x='{_LABEL}' y='{y}' width='{width - _LABEL - 4}' height='{_ROW}' fill='#f5f5f5'/>")
        for span in spans[index].spans if index in spans else ():
            x = _LABEL + (span.start - start) * scale
            w = max(0.6, (span.end - span.start) * scale)
            tasks = f"{span.count} task{'s' if span.count != 1 else ''}"
            what = f"{tasks}, {span.outcome}, {span.end - span.start:.3f}s"
            parts.append(f"<rect x='{_r(x)}' y='{y}' width='{_r(w)}' height='{_ROW}' "
                         f"fill='{OUTCOME_COLORS.get(span.outcome, '#888')}'><title>{what}</title></rect>")
    axis_y = len(rows) * (_ROW + _GAP) + 10
    parts.append(f"<text x='{_LABEL}' y='{axis_y}' font-size='10' fill='#555'>0s</text>"
                 f"<text x='{width - 4}' y='{axis_y}' font-size='10' fill='#555' text-anchor='end'>"
                 f"{end - start:.2f}s</text>")
    return (f"<svg xmlns='{_NS}' class='nbmp-timeline-plot' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
            f"data-spans='{sum(len(s.spans) for s in spans.values())}'>{''.join(parts)}</svg>")


def legend() -> str:
    return " ".join(f"<span style='color:{color}'>&#9632;</span> {name}" for name, color in OUTCOME_COLORS.items())


_NS = "http://www.w3.org/2000/svg"
_SVG = re.compile(r"<svg xmlns='[^']*' class='([^']*)'([^>]*)>(.*?)</svg>", re.S)
_TITLE = re.compile(r"<title>(.*?)</title>", re.S)
_DATA = re.compile(r"(data-[a-z]+='[^']*')")


def as_images(html: str) -> str:
    """Each inline ``<svg>`` of ``html`` as an ``<img>`` with a data URI (its first ``<title>`` the tooltip,
    its class and ``data-*`` kept): JupyterLab's sanitizer drops ``<svg>`` in an untrusted notebook."""
    def image(match: "re.Match[str]") -> str:
        cls, attrs, body = match.groups()
        src = base64.b64encode(match.group(0).encode()).decode()
        tip = _TITLE.search(body)
        title = f" title='{tip.group(1)}' alt='{tip.group(1)}'" if tip else " alt=''"
        data = " ".join(_DATA.findall(attrs))
        return f"<img class='{cls}' {data}{title} style='vertical-align:middle' src='data:image/svg+xml;base64,{src}'>"
    return _SVG.sub(image, html)


def _r(value: float) -> float:
    return round(value, 1)
