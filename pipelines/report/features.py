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
from transforms.contract.statistics import FeatureStatistics, Sizes, Statistics, ValueCount
from transforms.ui.style import in_split_order, split_class

TOP_ROWS = 10  # values of a string feature listed in its card
# A feature card's charts, all splits together, px: beside its table in a 1,100 px wide page.
CHARTS_W = 540


def found_shifts(statistics: Statistics) -> list[Shift]:
    """The rules of `pipelines.report.shift` that fire, for every split after the first (train)
    against it, feature by feature in train's order."""
    splits = statistics.splits
    order = in_split_order(splits)
    if len(order) < 2:
        return []
    train = order[0]
    features = splits[train].features
    found = []
    for split in order[1:]:
        other = splits[split].features
        for feature, stats in features.items():
            if feature in other and stats.type == other[feature].type:
                found += shifts(feature, stats, split, other[feature], train)
    return found


def features_section(manifest: Manifest, statistics: Statistics, found: list[Shift]) -> str:
    """One card per feature with every split side by side, train first: a table of the splits'
    statistics (a row each) and their charts on one scale; the rules of `shift` that fire."""
    splits = statistics.splits
    order = in_split_order(splits)
    index = {split: i for i, split in enumerate(order)}
    counts = []
    for split in order:
        validated = splits[split].records
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
    names = [f for f in manifest.features if any(f in splits[s].features for s in order)]
    for split in order:
        names += [f for f in splits[split].features if f not in names]
    cards = []
    for feature in names:
        per_split = {
            split: splits[split].features[feature]
            for split in order
            if feature in splits[split].features
        }
        flags = [f for f in found if f.feature == feature]
        cards.append(_feature_card(feature, per_split, index, flags))
    return html_section("features", "Feature statistics", intro + "".join(cards))


def _feature_card(
    feature: str,
    per_split: dict[str, FeatureStatistics],
    index: dict[str, int],
    flags: list[Shift],
) -> str:
    """The feature's card: the rules that fire, then its table (the feature's name heads the
    splits' column) and the splits' charts side by side."""
    first = next(iter(per_split.values()))
    kind = first.type
    if first.is_number:
        header, cells = ["mean", "std", "min", "max"], _number_cells
        charts = _histogram_figures(feature, per_split, index)
    elif first.is_text:
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
    per_split: dict[str, FeatureStatistics],
    index: dict[str, int],
    flags: list[Shift],
    header: list[str],
    cells: Callable[[str, str, FeatureStatistics], list[str]],
) -> str:
    """A row per split: records, missing (rate) and the type's `cells`; a flagged split's row
    marked."""
    flagged = {f.split for f in flags}
    head = "".join(f'<th class="n">{escape(h)}</th>' for h in ["records", "missing", *header])
    rows = []
    for split, s in per_split.items():
        missing = (
            stat_span(split, feature, "missing", s.missing)
            + ' <span class="muted">('
            + stat_span(split, feature, "missing_rate", s.missing_rate,
                         fmt_percent(s.missing_rate))
            + ")</span>"
        )  # fmt: skip
        row = [
            f"<td>{_swatch(index[split])}{escape(split)}</td>",
            stat_cell(split, feature, "records", s.records, fmt_int(s.records)),
            f'<td class="n">{missing}</td>',
            *cells(split, feature, s),
        ]
        css = ' class="flagged"' if split in flagged else ""
        rows.append(f"<tr{css}{attrs(data_split=split)}>{''.join(row)}</tr>")
    return (
        f'<table class="splits"><thead><tr><th>{title}</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _number_cells(split: str, feature: str, s: FeatureStatistics) -> list[str]:
    return [
        stat_cell(split, feature, "mean", s.mean),
        stat_cell(split, feature, "std", s.std),
        stat_cell(split, feature, "min", s.min),
        stat_cell(split, feature, "max", s.max),
    ]


def _string_cells(split: str, feature: str, s: FeatureStatistics) -> list[str]:
    distinct = _distinct(s)
    spans = [stat_span(split, feature, f"length_{k}", v) for k, v in _sizes(s.length)]
    return [
        stat_cell(split, feature, "distinct", s.distinct, distinct),
        f'<td class="n">{" / ".join(spans)}</td>',
    ]


def _size_cells(split: str, feature: str, s: FeatureStatistics) -> list[str]:
    return [stat_cell(split, feature, f"size_{k}", v, fmt_bytes(v)) for k, v in _sizes(s.size)]


def _sizes(sizes: Sizes | None) -> list[tuple[str, float | None]]:
    """(name, value) of a feature's lengths or sizes in the order the cards show them: min,
    mean, max (None each where the statistics hold none)."""
    sizes = sizes or Sizes()
    return [("min", sizes.min), ("mean", sizes.mean), ("max", sizes.max)]


def _distinct(s: FeatureStatistics) -> str:
    """A string feature's distinct values, `≈ N` where they were estimated."""
    distinct = fmt_int(s.distinct)
    if s.distinct is not None and s.distinct_exact is False:
        distinct = "≈ " + distinct
    return distinct


def _histogram_figures(
    feature: str, per_split: dict[str, FeatureStatistics], index: dict[str, int]
) -> list[str]:
    """The splits' histograms of a number, side by side on one scale."""
    splits = list(per_split)
    stats = list(per_split.values())
    last = None
    if stats[0].type == "int":
        last = max((s.max for s in stats if s.max is not None), default=None)
    charts = histograms(
        [make_id("hist", split, feature) for split in splits],
        [s.histogram or () for s in stats],
        last,
        [split_class(index[split]) for split in splits],
        [s.mean for s in stats],
        width=max(min(HIST_W, CHARTS_W // len(splits) - 20), 100),
    )
    return [_figure(split, index, chart) for split, chart in zip(splits, charts)]


def _share_figures(
    feature: str, per_split: dict[str, FeatureStatistics], index: dict[str, int]
) -> list[str]:
    """The splits' shares of a string's most frequent values, side by side, in one order (the
    first split's ranking, then the values only others count), at most TOP_ROWS of them."""
    counted = {split: value_counts(s) for split, s in per_split.items()}
    order = _value_order(list(per_split.values()))
    listed = order[:TOP_ROWS]
    rows: dict[str, list[tuple[str, int | None, float | None]]] = {}
    for split, s in per_split.items():
        counts, complete = counted[split]
        values = s.values
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
        more = f' <span class="muted">top {len(listed)} of {escape(_distinct(first))}</span>'
    figures = []
    for i, (split, s) in enumerate(per_split.items()):
        if not s.top:
            chart = '<span class="muted">no values</span>'
        else:
            chart = share_bars(make_id("top", split, feature), rows[split], scale, labels=i == 0,
                               css_class=split_class(index[split]), bar_w=bar_w)  # fmt: skip
        caption = ""
        if s.top and s.distinct_exact is False:  # beyond the exact counts
            caption = (
                f' <span class="muted"{attrs(id=make_id("sampled", split, feature))} title="the '
                f'shares of a sample of the values (more distinct values than counted)">'
                f"sampled</span>"
            )
        figures.append(_figure(split, index, chart, caption + (more if i == 0 else "")))
    return figures


def _value_order(stats: list[FeatureStatistics]) -> list[str]:
    """A string feature's counted values in one order for every split: the most frequent first
    in the first split (train), then those only later splits count, by their counts."""
    order: list[str] = []
    for s in stats:
        order += [v for v in _ranked(s) if v not in order]
    return order


def _ranked(s: FeatureStatistics) -> list[str]:
    """A feature's listed values (`top`), as text: the most frequent first, ties by value."""
    return [str(t.value) for t in sorted(s.top or (), key=lambda t: (-t.count, str(t.value)))]


def _figure(split: str, index: dict[str, int], chart: str, caption: str = "") -> str:
    return (
        f'<figure class="{split_class(index[split])}"{attrs(data_split=split)}>'
        f"<figcaption>{escape(split)}{caption}</figcaption>{chart}</figure>"
    )


def _swatch(i: int) -> str:
    return f'<span class="swatch {split_class(i)}"></span>'


def _points(share: float) -> str:
    return f"{100 * share:g} points"


def label_balance_section(manifest: Manifest, statistics: Statistics) -> str:
    label = manifest.label
    if not label:
        return ""
    order = in_split_order(statistics.splits)
    index = {split: i for i, split in enumerate(order)}
    found = {split: statistics.feature(split, label) for split in order}
    per_split = {split: s for split, s in found.items() if s is not None}
    if not per_split:
        return ""
    if next(iter(per_split.values())).is_number:
        charts = histograms(
            [make_id("label", split, "chart") for split in per_split],
            [s.histogram or () for s in per_split.values()],
            classes=[split_class(index[split]) for split in per_split],
            means=[s.mean for s in per_split.values()],
        )
    else:
        order_ = _label_order(manifest, per_split)
        charts = []
        for split, s in per_split.items():
            counts = {str(t.value): t.count for t in s.top or ()}
            top = [ValueCount(v, counts.get(v, 0)) for v in order_]
            charts.append(top_values(make_id("label", split, "chart"), top, total=s.values,
                                     css_class=split_class(index[split])))  # fmt: skip
    parts = [
        f'<figure class="{split_class(index[split])}"{attrs(id=make_id("label", split))}>'
        f"<figcaption>{escape(split)}</figcaption>{chart}</figure>"
        for split, chart in zip(per_split, charts)
    ]
    body = f'<p>Label: <code>{escape(label)}</code></p><div class="charts">{"".join(parts)}</div>'
    return html_section("label-balance", "Label balance", body)


def _label_order(manifest: Manifest, per_split: dict[str, FeatureStatistics]) -> list[str]:
    """One order of the label's values for every split: the config's `values`, else the most
    frequent first in the first split (train), then the values only other splits hold."""
    feature = manifest.features.get(manifest.label) if manifest.label is not None else None
    declared = [str(v) for v in feature.values] if feature and feature.values else []
    order = list(declared)
    for s in per_split.values():
        order += [v for v in _ranked(s) if v not in order]
    return order
