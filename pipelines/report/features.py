"""The run report's feature statistics: a card per feature with every split side by side (train
first, one colour per split), its table and its charts on one scale, and the split flagged where
it differs a lot from train (`pipelines.report.shift`); and the label's balance per split."""

from __future__ import annotations

from collections.abc import Callable

from pipelines.report.cells import (
    fmt_bytes,
    fmt_percent,
    html_section,
    make_id,
    stat_cell,
    stat_span,
)
from pipelines.report.shift import (
    MEAN_SHIFT_STD,
    MIN_EXPECTED,
    MISSING_GAP,
    SHARE_GAP,
    Shift,
    shifts,
    value_counts,
)
from pipelines.report.svg import (
    HIST_W,
    SHARE_BAR_W,
    SHARE_LABEL_W,
    attrs,
    clip,
    escape,
    fmt_int,
    histograms,
    share_bars,
    short,
    top_values,
)
from transforms.contract.manifest import Manifest
from transforms.ui.style import in_split_order, split_class

NUMBER_TYPES = ("int", "float")
SIZE_TYPES = ("bytes", "image")
TOP_ROWS = 10  # values of a string feature listed in its card
# A feature card's charts, all splits together, px: beside its table in a 1,100 px wide page.
CHARTS_W = 540


def found_shifts(statistics: dict) -> list[Shift]:
    """The rules of `pipelines.report.shift` that fire, for every split after the first (train)
    against it, feature by feature in train's order."""
    splits = statistics.get("splits") or {}
    order = in_split_order(splits)
    if len(order) < 2:
        return []
    train = order[0]
    features = splits[train].get("features") or {}
    found = []
    for split in order[1:]:
        other = splits[split].get("features") or {}
        for feature, stats in features.items():
            if feature in other and stats.get("type") == other[feature].get("type"):
                found += shifts(feature, stats, split, other[feature], train)
    return found


def features_section(manifest: Manifest, statistics: dict, found: list[Shift]) -> str:
    """One card per feature with every split side by side, train first: a table of the splits'
    statistics (a row each) and their charts on one scale; the rules of `shift` that fire."""
    splits = statistics.get("splits") or {}
    order = in_split_order(splits)
    index = {split: i for i, split in enumerate(order)}
    counts = []
    for split in order:
        validated = splits[split].get("records")
        entry = manifest.splits.get(split)
        written = entry.records if entry is not None else None
        text = f"{_swatch(index[split])}{escape(split)}: {fmt_int(validated)} records validated"
        if written is not None and written != validated:
            text += f" ({fmt_int(written)} written after dropping duplicates)"
        counts.append(text)
    intro = "; ".join(counts) + "."
    if len(order) > 1:
        intro += (
            f" <span class=\"muted\">A feature's histograms share one scale (a bar's area: its "
            f"share of the split's values; dashed: the mean). A split's row is flagged where it "
            f"differs a lot from {escape(order[0])}'s: missing rate ±{_points(MISSING_GAP)}, "
            f"mean off by more than {MEAN_SHIFT_STD:g} of its std, a value absent though "
            f"{MIN_EXPECTED} or more were expected, a value's share ±{_points(SHARE_GAP)}.</span>"
        )
    intro = f"<p>{intro}</p>"
    names = [f for f in manifest.features if any(f in (splits[s].get("features") or {})
                                                 for s in order)]  # fmt: skip
    for split in order:
        names += [f for f in splits[split].get("features") or {} if f not in names]
    cards = []
    for feature in names:
        per_split = {
            split: splits[split]["features"][feature]
            for split in order
            if feature in (splits[split].get("features") or {})
        }
        flags = [f for f in found if f.feature == feature]
        cards.append(_feature_card(feature, per_split, index, flags))
    return html_section("features", "Feature statistics", intro + "".join(cards))


def _feature_card(
    feature: str, per_split: dict[str, dict], index: dict[str, int], flags: list[Shift]
) -> str:
    """The feature's card: the rules that fire, then its table (the feature's name heads the
    splits' column) and the splits' charts side by side."""
    kind = next(iter(per_split.values())).get("type", "")
    if kind in NUMBER_TYPES:
        header, cells = ["mean", "std", "min", "max"], _number_cells
        charts = _histogram_figures(feature, per_split, index)
    elif kind == "string":
        header, cells = ["distinct", "length min/mean/max"], _string_cells
        charts = _share_figures(feature, per_split, index)
    else:
        header, cells, charts = ["size min", "size mean", "size max"], _size_cells, []
    title = (
        f"<strong{attrs(title=feature)}>{escape(short(clip(feature), 32))}</strong> "
        f'<span class="muted">{escape(kind)}</span>'
    )
    table = _split_table(feature, title, per_split, index, flags, header, cells)
    banner = ""
    if flags:
        items = "".join(
            f"<li{attrs(data_split=f.split, data_rule=f.rule)}>{_swatch(index[f.split])}"
            f"{escape(f.split)}: {escape(f.text)}</li>"
            for f in flags
        )
        banner = f'<div class="banner"{attrs(id=make_id("shifts", feature))}><ul>{items}</ul></div>'
    return (
        f'<div class="feature"{attrs(id=make_id("feature", feature), data_feature=feature)}>'
        f'{banner}<div class="charts">{table}{_side_by_side(charts)}</div></div>'
    )


def _side_by_side(charts: list[str]) -> str:
    """The splits' charts in one row that wraps as a whole (under the table when it is wide),
    never one chart alone on a row of its own, away from the others' scale."""
    return f'<div class="split-charts">{"".join(charts)}</div>' if charts else ""


def _split_table(
    feature: str,
    title: str,
    per_split: dict[str, dict],
    index: dict[str, int],
    flags: list[Shift],
    header: list[str],
    cells: Callable[[str, str, dict], list[str]],
) -> str:
    """A row per split: records, missing (rate) and the type's `cells`; a flagged split's row
    marked."""
    flagged = {f.split for f in flags}
    head = "".join(f'<th class="n">{escape(h)}</th>' for h in ["records", "missing", *header])
    rows = []
    for split, s in per_split.items():
        missing = (
            stat_span(split, feature, "missing", s.get("missing"))
            + ' <span class="muted">('
            + stat_span(split, feature, "missing_rate", s.get("missing_rate"),
                         fmt_percent(s.get("missing_rate")))
            + ")</span>"
        )  # fmt: skip
        row = [
            f"<td>{_swatch(index[split])}{escape(split)}</td>",
            stat_cell(split, feature, "records", s.get("records"), fmt_int(s.get("records"))),
            f'<td class="n">{missing}</td>',
            *cells(split, feature, s),
        ]
        css = ' class="flagged"' if split in flagged else ""
        rows.append(f"<tr{css}{attrs(data_split=split)}>{''.join(row)}</tr>")
    return (
        f'<table class="splits"><thead><tr><th>{title}</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _number_cells(split: str, feature: str, s: dict) -> list[str]:
    return [stat_cell(split, feature, k, s.get(k)) for k in ("mean", "std", "min", "max")]


def _string_cells(split: str, feature: str, s: dict) -> list[str]:
    distinct = fmt_int(s.get("distinct"))
    if s.get("distinct") is not None and not s.get("distinct_exact", True):
        distinct = "≈ " + distinct
    length = s.get("length") or {}
    spans = [stat_span(split, feature, f"length_{k}", length.get(k))
             for k in ("min", "mean", "max")]  # fmt: skip
    return [
        stat_cell(split, feature, "distinct", s.get("distinct"), distinct),
        f'<td class="n">{" / ".join(spans)}</td>',
    ]


def _size_cells(split: str, feature: str, s: dict) -> list[str]:
    size = s.get("size") or {}
    return [stat_cell(split, feature, f"size_{k}", size.get(k), fmt_bytes(size.get(k)))
            for k in ("min", "mean", "max")]  # fmt: skip


def _histogram_figures(feature: str, per_split: dict[str, dict], index: dict[str, int]):
    """The splits' histograms of a number, side by side on one scale."""
    splits = list(per_split)
    stats = list(per_split.values())
    last = None
    if stats[0].get("type") == "int":
        last = max((s["max"] for s in stats if s.get("max") is not None), default=None)
    charts = histograms(
        [make_id("hist", split, feature) for split in splits],
        [s.get("histogram") or [] for s in stats],
        last,
        [split_class(index[split]) for split in splits],
        [s.get("mean") for s in stats],
        width=max(min(HIST_W, CHARTS_W // len(splits) - 20), 100),
    )
    return [_figure(split, index, chart) for split, chart in zip(splits, charts)]


def _share_figures(feature: str, per_split: dict[str, dict], index: dict[str, int]):
    """The splits' shares of a string's most frequent values, side by side, in one order (the
    first split's ranking, then the values only others count), at most TOP_ROWS of them."""
    counted = {split: value_counts(s) for split, s in per_split.items()}
    order = _value_order([s for s in per_split.values()])
    listed = order[:TOP_ROWS]
    rows: dict[str, list[tuple[str, int | None, float | None]]] = {}
    for split, s in per_split.items():
        counts, complete = counted[split]
        values = s.get("values") or 0
        rows[split] = []
        for value in listed:
            count = counts.get(value, 0 if complete else None)
            share = count / values if count is not None and values else None
            rows[split].append((value, count, share))
    scale = max((share or 0 for r in rows.values() for _, _, share in r), default=0)
    bar_w = max(min(SHARE_BAR_W, (CHARTS_W - SHARE_LABEL_W) // len(per_split) - 60), 40)
    first = next(iter(per_split.values()))
    more = ""
    if len(order) > len(listed):
        distinct = fmt_int(first.get("distinct"))
        if not first.get("distinct_exact", True):
            distinct = "≈ " + distinct
        more = f' <span class="muted">top {len(listed)} of {escape(distinct)}</span>'
    figures = []
    for i, (split, s) in enumerate(per_split.items()):
        if not s.get("top"):
            chart = '<span class="muted">no values</span>'
        else:
            chart = share_bars(make_id("top", split, feature), rows[split], scale, labels=i == 0,
                               css_class=split_class(index[split]), bar_w=bar_w)  # fmt: skip
        caption = ""
        if s.get("top") and not s.get("distinct_exact", True):  # beyond the exact counts
            caption = (
                f' <span class="muted"{attrs(id=make_id("sampled", split, feature))} title="the '
                f'shares of a sample of the values (more distinct values than counted)">'
                f"sampled</span>"
            )
        figures.append(_figure(split, index, chart, caption + (more if i == 0 else "")))
    return figures


def _value_order(stats: list[dict]) -> list[str]:
    """A string feature's counted values in one order for every split: the most frequent first
    in the first split (train), then those only later splits count, by their counts."""
    order: list[str] = []
    for s in stats:
        ranked = sorted(s.get("top") or [], key=lambda t: (-t.get("count", 0), str(t["value"])))
        order += [str(t["value"]) for t in ranked if str(t["value"]) not in order]
    return order


def _figure(split: str, index: dict[str, int], chart: str, caption: str = "") -> str:
    return (
        f'<figure class="{split_class(index[split])}"{attrs(data_split=split)}>'
        f"<figcaption>{escape(split)}{caption}</figcaption>{chart}</figure>"
    )


def _swatch(i: int) -> str:
    return f'<span class="swatch {split_class(i)}"></span>'


def _points(share: float) -> str:
    return f"{100 * share:g} points"


def label_balance_section(manifest: Manifest, statistics: dict) -> str:
    label = manifest.label
    if not label:
        return ""
    splits = statistics.get("splits") or {}
    order = in_split_order(splits)
    index = {split: i for i, split in enumerate(order)}
    found = {split: (splits[split].get("features") or {}).get(label) for split in order}
    per_split = {split: s for split, s in found.items() if s is not None}
    if not per_split:
        return ""
    numeric = next(iter(per_split.values())).get("type") in NUMBER_TYPES
    if numeric:
        charts = histograms(
            [make_id("label", split, "chart") for split in per_split],
            [s.get("histogram") or [] for s in per_split.values()],
            classes=[split_class(index[split]) for split in per_split],
            means=[s.get("mean") for s in per_split.values()],
        )
    else:
        order_ = _label_order(manifest, per_split)
        charts = []
        for split, s in per_split.items():
            counts = {str(t.get("value")): t.get("count", 0) for t in s.get("top") or []}
            top = [{"value": v, "count": counts.get(v, 0)} for v in order_]
            charts.append(top_values(make_id("label", split, "chart"), top, total=s.get("values"),
                                     css_class=split_class(index[split])))  # fmt: skip
    parts = [
        f'<figure class="{split_class(index[split])}"{attrs(id=make_id("label", split))}>'
        f"<figcaption>{escape(split)}</figcaption>{chart}</figure>"
        for split, chart in zip(per_split, charts)
    ]
    body = f'<p>Label: <code>{escape(label)}</code></p><div class="charts">{"".join(parts)}</div>'
    return html_section("label-balance", "Label balance", body)


def _label_order(manifest: Manifest, per_split: dict[str, dict]) -> list[str]:
    """One order of the label's values for every split: the config's `values`, else the most
    frequent first in the first split (train), then the values only other splits hold."""
    feature = manifest.features.get(manifest.label) if manifest.label is not None else None
    declared = [str(v) for v in feature.values] if feature and feature.values else []
    order = list(declared)
    for s in per_split.values():
        ranked = sorted(s.get("top") or [], key=lambda t: (-t.get("count", 0), str(t["value"])))
        order += [str(t["value"]) for t in ranked if str(t["value"]) not in order]
    return order
