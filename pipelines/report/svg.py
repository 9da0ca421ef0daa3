"""Hand-written inline SVG for the run report (`pipelines.report.page`): histograms of several
splits on one scale, the splits' shares of a feature's values side by side, top-value bars and
the pipeline graph, with the escaping and number formatting they share with the page.

No plotting library: the page must open offline and stay small, and these few shapes are
simpler to draw than to configure. Every text is HTML-escaped (`escape`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transforms.contract.statistics import Bar, ValueCount
from transforms.ui.safe import for_html

BAR_W, BAR_H = 240, 48  # shard chart area, px
HIST_W, HIST_H = 200, 44  # one split's histogram, px (at most; splits side by side)
HISTOGRAM_MIN_BARS = 40  # a bin of one value is drawn 1/40 of the axis wide
ROW_H = 16  # one bar of a top-values chart, px
SHARE_LABEL_W, SHARE_BAR_W = 110, 90  # the values' column and a split's bars (at most), px
# Of any text from the data (a rejected record, a value, a field name): cut with `clip`.
MAX_TEXT_CHARS = 400


def clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text`, or its first `limit` characters and `… (N bytes)`, N its UTF-8 size."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text.encode('utf-8', 'surrogatepass'))} bytes)"


def escape(text: Any) -> str:
    return for_html(str(text))


def attrs(**attrs: Any) -> str:
    """` name="value"` for each attribute that is not None; data_x becomes data-x."""
    return "".join(
        f' {k.replace("_", "-")}="{escape(raw_value(v))}"'
        for k, v in attrs.items()
        if v is not None
    )


def raw_value(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def fmt_int(value: Any) -> str:
    return "–" if value is None else f"{value:,}"


def fmt_float(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, int):
        return str(value)
    return f"{value:.6g}"


def short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(n - 1, 1)] + "…"


def histograms(
    chart_ids: list[str],
    bin_lists: Sequence[Sequence[Bar]],
    last: Any = None,
    classes: list[str] | None = None,
    means: list[float | None] | None = None,
    width: int = HIST_W,
) -> list[str]:
    """One histogram per split (ids, bins, CSS classes and means in the same order), all on one
    scale, so that they compare at a glance: one x axis, from the smallest bin's low to the
    largest bin's high of all splits, each bar where its bin lies on it; bar heights are the
    share of the split's values per unit of x, on one y scale (a bar's area is its share,
    whatever the split's size or its bins' widths). The axis ends are labelled with the low and
    `last` (an int feature's largest value, which the exclusive high bound of the last bin would
    overstate by one), else the high; a dashed line marks each split's mean. Each is `width`
    px wide."""
    drawn = [b for b in bin_lists if b]
    if not drawn:
        return ['<span class="muted">no values</span>' for _ in bin_lists]
    lo = min(b[0].low for b in drawn)
    hi = max(b[-1].high for b in drawn)
    span = hi - lo
    narrowest = span / HISTOGRAM_MIN_BARS  # of a bin of one value, when the axis has a width

    def x(value: float) -> float:
        return width * (value - lo) / span if span else 0.0

    def density(b: Bar, total: int) -> float:
        width = (b.high - b.low) or narrowest
        return b.count / total / width if span else b.count / total

    totals = [sum(b.count for b in bins) or 1 for bins in bin_lists]
    top = max(density(b, t) for bins, t in zip(bin_lists, totals) for b in bins) or 1
    high_label = fmt_float(hi if last is None else last)
    out = []
    for i, (chart_id, bins, total) in enumerate(zip(chart_ids, bin_lists, totals)):
        if not bins:
            out.append('<span class="muted">no values</span>')
            continue
        bars = []
        for b in bins:
            count, low, high = b.count, b.low, b.high
            h = round(HIST_H * density(b, total) / top, 2)
            left, right = (
                (x(low), x(high if high > low else low + narrowest)) if span else (0, width)
            )
            tip = (
                f"[{fmt_float(low)}, {fmt_float(high)}): {fmt_int(count)} "
                f"({100 * count / total:.1f} %)"
            )
            bars.append(
                f'<rect class="bar"{attrs(data_count=count)} x="{left:.2f}" '
                f'y="{HIST_H - h:.2f}" width="{max(right - left - 1, 0.5):.2f}" height="{h}">'
                f"<title>{escape(tip)}</title></rect>"
            )
        mean = means[i] if means else None
        if mean is not None and span:
            bars.append(
                f'<line class="mean" x1="{x(mean):.2f}" x2="{x(mean):.2f}" y1="0" '
                f'y2="{HIST_H}"><title>mean {escape(fmt_float(mean))}</title></line>'
            )
        labels = (
            f'<text x="0" y="{HIST_H + 12}">{escape(fmt_float(lo))}</text>'
            f'<text x="{width}" y="{HIST_H + 12}" text-anchor="end">{escape(high_label)}</text>'
        )
        css = f"histogram {classes[i]}" if classes else "histogram"
        out.append(
            f'<svg class="{escape(css)}" id="{escape(chart_id)}" width="{width}" '
            f'height="{HIST_H + 16}" viewBox="0 0 {width} {HIST_H + 16}">'
            f"{''.join(bars)}{labels}</svg>"
        )
    return out


def share_bars(
    chart_id: str,
    rows: list[tuple[str, int | None, float | None]],
    scale: float,
    labels: bool,
    css_class: str = "",
    bar_w: int = SHARE_BAR_W,
) -> str:
    """Horizontal bars of one split's values: a row per (value, count, share of the split's
    values) in the given order, the share as text; the bars' widths to the scale of `scale`
    (the largest share of any split shown beside, so that splits compare). A count of None (a
    value this split's statistics did not count) shows as "–". With `labels`, the values
    first (the leftmost of the splits shown side by side)."""
    label_w = SHARE_LABEL_W if labels else 0
    parts = []
    for i, (value, count, share) in enumerate(rows):
        y = i * ROW_H
        value = clip(value)  # the page stays small whatever the data
        shown = value or '""'  # the empty string, shown as such
        if labels:
            parts.append(
                f'<text x="{label_w - 4}" y="{y + 12}" text-anchor="end">'
                f"{escape(short(shown, 18))}<title>{escape(shown)}</title></text>"
            )
        w = round(bar_w * share / (scale or 1), 2) if share else 0
        text = "–" if share is None else f"{100 * share:.1f} %"
        tip = f"{shown}: " + ("not counted" if count is None else f"{fmt_int(count)} ({text})")
        parts.append(
            f'<rect class="bar"{attrs(data_value=value, data_count=count, data_share=share)} '
            f'x="{label_w}" y="{y + 2}" width="{w}" height="{ROW_H - 4}">'
            f"<title>{escape(tip)}</title></rect>"
            f'<text x="{label_w + w + 4}" y="{y + 12}">{escape(text)}</text>'
        )
    width, height = label_w + bar_w + 48, ROW_H * len(rows)
    css = f"shares {css_class}".strip()
    return (
        f'<svg class="{escape(css)}" id="{escape(chart_id)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">{"".join(parts)}</svg>'
    )


def top_values(
    chart_id: str, top: Sequence[ValueCount], total: int | None = None, css_class: str = ""
) -> str:
    """Horizontal bars, one per value in the given order, with the value and its count."""
    if not top:
        return '<span class="muted">no values</span>'
    label_w, bar_w = 130, 160
    most = max(t.count for t in top) or 1
    rows = []
    for i, t in enumerate(top):
        value, count = clip(str(t.value)), t.count
        value = value or '""'  # the empty string, shown as such
        y = i * ROW_H
        w = round(bar_w * count / most, 2)
        text = fmt_int(count) + (f" ({100 * count / total:.1f} %)" if total else "")
        rows.append(
            f'<text x="{label_w - 4}" y="{y + 12}" text-anchor="end">{escape(short(value, 20))}'
            f"<title>{escape(value)}</title></text>"
            f'<rect class="bar"{attrs(data_value=value, data_count=count)} x="{label_w}" '
            f'y="{y + 2}" width="{w}" height="{ROW_H - 4}"/>'
            f'<text x="{label_w + w + 4}" y="{y + 12}">{escape(text)}</text>'
        )
    width, height = label_w + bar_w + 90, ROW_H * len(top)
    css = f"top-values {css_class}".strip()
    return (
        f'<svg class="{escape(css)}" id="{escape(chart_id)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">{"".join(rows)}</svg>'
    )


def bar_chart(
    chart_id: str, values: list[int], tips: list[str], top: int | None = None, css_class: str = ""
) -> str:
    """Vertical bars of `values` (e.g. shard sizes) in their order, with a tooltip each; their
    heights to the scale of `top` (several charts on one scale), else of the largest value."""
    if not values:
        return ""
    top = max(top or 0, *values) or 1
    width = BAR_W / len(values)
    bars = "".join(
        f'<rect class="bar"{attrs(data_count=v)} x="{i * width:.2f}" '
        f'y="{BAR_H - BAR_H * v / top:.2f}" width="{max(width - 1, 0.5):.2f}" '
        f'height="{BAR_H * v / top:.2f}"><title>{escape(tip)}</title></rect>'
        for i, (v, tip) in enumerate(zip(values, tips))
    )
    css = f"bars {css_class}".strip()
    return (
        f'<svg class="{escape(css)}" id="{escape(chart_id)}" width="{BAR_W}" height="{BAR_H}" '
        f'viewBox="0 0 {BAR_W} {BAR_H}">{bars}</svg>'
    )


def graph_layers(nodes: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    """Layer of each node of a DAG: the length of the longest path from a source to it."""
    preds: dict[str, list[str]] = {n: [] for n in nodes}
    succs: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        preds[b].append(a)
        succs[a].append(b)
    layer = {n: 0 for n in nodes}
    waiting = {n: len(preds[n]) for n in nodes}
    ready = [n for n in nodes if not waiting[n]]
    while ready:
        n = ready.pop(0)
        for m in succs[n]:
            layer[m] = max(layer[m], layer[n] + 1)
            waiting[m] -= 1
            if not waiting[m]:
                ready.append(m)
    if any(waiting.values()):
        raise ValueError("the pipeline graph has a cycle")
    return layer


def graph_svg(graph: dict) -> str:
    """The graph as inline SVG: layers top to bottom, boxes with labels, curved arrows."""
    labels = {n["id"]: str(n.get("label", n["id"])) for n in graph.get("nodes", [])}
    if not labels:
        return '<p class="muted">The graph has no steps.</p>'
    edges = [(a, b) for a, b in graph.get("edges", []) if a in labels and b in labels]
    layer = graph_layers(list(labels), edges)
    rows: dict[int, list[str]] = {}
    for n in labels:  # graph order within a layer, then ordered by the parents' positions
        rows.setdefault(layer[n], []).append(n)
    position: dict[str, float] = {}
    for depth in sorted(rows):
        row = rows[depth]
        if depth:
            parents = {n: [position[a] for a, b in edges if b == n] for n in row}
            row.sort(key=lambda n: sum(parents[n]) / len(parents[n]) if parents[n] else 0)
        for i, n in enumerate(row):
            position[n] = i - (len(row) - 1) / 2
    box_w = min(max((len(t) for t in labels.values()), default=8) * 6.6 + 20, 260)
    box_h, gap_x, gap_y, margin = 26, 24, 34, 8
    widest = max((len(r) for r in rows.values()), default=1)
    width = widest * (box_w + gap_x) + 2 * margin
    height = len(rows) * (box_h + gap_y) - gap_y + 2 * margin
    centre: dict[str, tuple[float, float]] = {
        n: (width / 2 + position[n] * (box_w + gap_x), margin + layer[n] * (box_h + gap_y))
        for n in labels
    }
    max_chars = int((box_w - 12) / 6.6)
    parts = [
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#777"/>'
        "</marker></defs>"
    ]
    # Arrows leave and enter a box at spread points, ordered by the other end's position, so
    # that the edges of a node with many inputs or outputs stay apart.
    port_out = _ports(edges, centre, box_w, outgoing=True)
    port_in = _ports(edges, centre, box_w, outgoing=False)
    for a, b in edges:
        x1, y1 = port_out[a, b], centre[a][1] + box_h
        x2, y2 = port_in[a, b], centre[b][1]
        bend = (y2 - y1) / 2
        parts.append(
            f'<path class="edge"{attrs(data_from=a, data_to=b)} marker-end="url(#arrow)" '
            f'd="M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} {x2:.1f},{y2 - bend:.1f} '
            f'{x2:.1f},{y2:.1f}"/>'
        )
    for n, label in labels.items():
        x, y = centre[n]
        parts.append(
            f'<g class="node"{attrs(data_node=n)}><title>{escape(label)}</title>'
            f'<rect x="{x - box_w / 2:.1f}" y="{y:.1f}" width="{box_w:.1f}" height="{box_h}" '
            f'rx="4"/><text x="{x:.1f}" y="{y + 17:.1f}" text-anchor="middle">'
            f"{escape(short(label, max_chars))}</text></g>"
        )
    return (
        f'<svg id="pipeline-graph" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}">{"".join(parts)}</svg>'
    )


def _ports(
    edges: list[tuple[str, str]],
    centre: dict[str, tuple[float, float]],
    box_w: float,
    outgoing: bool,
) -> dict[tuple[str, str], float]:
    """The x where each edge leaves its source box (`outgoing`) or enters its target box."""
    by_node: dict[str, list[tuple[str, str]]] = {}
    for edge in edges:
        by_node.setdefault(edge[0] if outgoing else edge[1], []).append(edge)
    ports = {}
    for node, node_edges in by_node.items():
        other = 1 if outgoing else 0
        node_edges.sort(key=lambda e: centre[e[other]][0])
        step = min(14.0, (box_w - 16) / max(len(node_edges), 1))
        for i, edge in enumerate(node_edges):
            ports[edge] = centre[node][0] + (i - (len(node_edges) - 1) / 2) * step
    return ports
