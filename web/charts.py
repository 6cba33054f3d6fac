"""Server-side SVG charts: horizontal bars with their numbers written beside them, a zero line
when values go negative, an optional threshold line, and a title and summary for screen readers.
Colours come from the stylesheet's classes, so the charts follow its contrast choices."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import count

from markupsafe import Markup, escape

WIDTH, LABEL_W, VALUE_W, TOP = 760, 240, 200, 8
ROW_H, COMPACT_ROW_H, COMPACT_AFTER = 24, 17, 12  # many bars get shorter rows
_ids = count(1)


@dataclass(frozen=True)
class Bar:
    label: str
    value: float | None
    kind: str = "adapter"  # a CSS class: adapter, base, measured, assumed, used, over
    note: str = ""  # written after the number, e.g. "assumed"


def bar_chart(title: str, bars: list[Bar], *, unit: str = "", threshold: float | None = None,
              threshold_label: str = "", log: bool = False, digits: int = 3) -> Markup:
    if not bars:
        return Markup("")
    chart_id = f"chart-{next(_ids)}"
    plot_w = WIDTH - LABEL_W - VALUE_W - 16  # room to the right of a threshold at the edge
    scale = _LogScale(bars, threshold, plot_w) if log else _LinearScale(bars, threshold, plot_w)
    row_h = COMPACT_ROW_H if len(bars) > COMPACT_AFTER else ROW_H
    height = TOP * 2 + row_h * len(bars) + (16 if threshold is not None else 0)
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
             f'aria-labelledby="{chart_id}-t {chart_id}-d" preserveAspectRatio="xMinYMin meet">',
             f'<title id="{chart_id}-t">{escape(title)}</title>',
             f'<desc id="{chart_id}-d">{escape(_summary(bars, unit, threshold, threshold_label, digits))}</desc>']
    zero = LABEL_W + scale.zero
    baseline = row_h - 7
    for row, bar in enumerate(bars):
        y = TOP + row * row_h
        parts.append(f'<text class="label" x="{LABEL_W - 8}" y="{y + baseline}" text-anchor="end">'
                     f'{escape(_clip(bar.label, 36))}</text>')
        if bar.value is None:
            parts.append(f'<text class="value" x="{LABEL_W + 4}" y="{y + baseline}">not measured</text>')
            continue
        end = LABEL_W + scale.at(bar.value)
        x, w = min(zero, end), max(abs(end - zero), 1.5)
        parts.append(f'<rect class="bar {escape(bar.kind)}" x="{x:.1f}" y="{y + 3}" '
                     f'width="{w:.1f}" height="{row_h - 6}"/>')
        text = _number(bar.value, digits) + (f" {unit}" if unit else "") + (f" · {bar.note}" if bar.note else "")
        parts.append(f'<text class="value" x="{WIDTH - VALUE_W + 6}" y="{y + baseline}">{escape(text)}</text>')
    bottom = TOP + row_h * len(bars)
    if scale.zero > 0:
        parts.append(f'<line class="axis" x1="{zero:.1f}" x2="{zero:.1f}" y1="{TOP}" y2="{bottom}"/>')
    if threshold is not None:
        x = LABEL_W + scale.at(threshold)
        parts.append(f'<line class="threshold" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP - 4}" y2="{bottom + 2}"/>')
        parts.append(f'<text class="threshold-label" x="{x:.1f}" y="{bottom + 14}" text-anchor="middle">'
                     f'{escape(threshold_label or _number(threshold, digits))}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


class _LinearScale:
    def __init__(self, bars: list[Bar], threshold: float | None, width: float) -> None:
        values = [b.value for b in bars if b.value is not None] + ([threshold] if threshold is not None else [])
        self.low, self.high = min([0.0, *values]), max([0.0, *values])
        if self.high == self.low:
            self.high = self.low + 1
        self.width = width
        self.zero = self.at(0.0)

    def at(self, value: float) -> float:
        return (value - self.low) / (self.high - self.low) * self.width


class _LogScale:
    """For figures that span orders of magnitude, such as logprob differences."""

    def __init__(self, bars: list[Bar], threshold: float | None, width: float) -> None:
        values = [abs(b.value) for b in bars if b.value] + ([threshold] if threshold else [])
        self.low = math.floor(math.log10(min(values))) if values else -8
        self.high = math.ceil(math.log10(max(values))) if values else 0
        self.high = max(self.high, self.low + 1)
        self.width, self.zero = width, 0.0

    def at(self, value: float) -> float:
        exponent = math.log10(abs(value)) if value else self.low
        return (max(exponent, self.low) - self.low) / (self.high - self.low) * self.width


def _number(value: float, digits: int) -> str:
    if value == 0:
        return "0"
    if abs(value) < 10 ** -max(digits, 2) or abs(value) >= 10**9:
        return f"{value:.2e}"
    text = f"{value:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _summary(bars: list[Bar], unit: str, threshold: float | None, threshold_label: str, digits: int) -> str:
    listed = "; ".join(f"{b.label}: {'not measured' if b.value is None else _number(b.value, digits)}"
                       f"{' ' + unit if unit and b.value is not None else ''}"
                       f"{' (' + b.note + ')' if b.note else ''}" for b in bars)
    if threshold is not None:
        listed += f". Threshold: {threshold_label or _number(threshold, digits)}"
    return listed


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
