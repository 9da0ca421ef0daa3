"""The ETL's run report: one self-contained HTML page (OUTPUT/report.html) describing a run.

`render` is a pure function of the dataset's manifest (the contract's typed `Manifest`, read
through its attributes), its statistics (statistics.json), the pipeline graph, the stage timings
and a few rejected records per reason. The page has no external CSS, scripts, fonts or images:
it opens offline, from a bucket or an e-mail attachment.
Charts are hand-written inline SVG (`pipelines.report.svg`). Every text from the data is
HTML-escaped, and cut to `svg.MAX_TEXT_CHARS` characters with its full size noted (`clip`), so
that the page stays small whatever the data. Numbers that a reader (or a test) looks up carry
stable ids, e.g. `id="split-train-records"`, and the raw value in `data-value`; the ids are
listed in `render`'s docstring and made by `_id`, one id per name.
Feature statistics are one card per feature with every split side by side (train first, the
splits in one colour each, `transforms.contract.report`): a table with a row per split, and the
splits' charts on one scale. A split that differs a lot from train by the rules of
`pipelines.report.shift` is flagged in the card and in the page's warning banner.

Longer than most modules because it is one page: its sections, each a small function of the
manifest and statistics, and the page's styles; its charts are `pipelines.report.svg`.
"""

from __future__ import annotations

import hashlib
import json
import statistics as pystats
from collections.abc import Callable, Iterable
from typing import Any

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
    bar_chart,
    clip,
    escape,
    fmt_float,
    fmt_int,
    graph_svg,
    histograms,
    share_bars,
    short,
    top_values,
)
from transforms.contract.manifest import Manifest
from transforms.contract.report import in_split_order, page, split_class
from transforms.validation.check import describe

NUMBER_TYPES = ("int", "float")
SIZE_TYPES = ("bytes", "image")
MAX_EXAMPLES = 5  # rejected records shown per reason
MAX_ID_PART_CHARS = 200  # of one name in an element id, escaped; longer ones end in a digest
TOP_ROWS = 10  # values of a string feature listed in its card
# A feature card's charts, all splits together, px: beside its table in a 1,100 px wide page.
CHARTS_W = 540


def render(
    manifest: Manifest,
    statistics: dict[str, Any] | None = None,
    graph: dict[str, Any] | None = None,
    timings: dict[str, Any] | None = None,
    rejected_examples: dict[str, list[dict[str, Any]]] | None = None,
) -> str:
    """The run report as one HTML page.

    Sections (element ids): `summary`, `sources`, `splits`, `rejected`, `shards`, `features`
    and `label-balance` (with statistics), `timings` (with timings), `graph` (with a graph).
    Numbers (text formatted, raw value in `data-value`):
    `summary-{created,runner,elapsed,read,written,rejected,duplicates,joined,throughput}`,
    `source-{S}-records`, `source-{S}-ignored-{FIELD}`, `split-{P}-records`,
    `split-{P}-validated` (statistics' count before duplicates were dropped),
    `shards-{P}-{count,bytes,min,median,max}`, `stat-{P}-{F}-{STAT}` for STAT in records,
    missing, missing_rate, min, max, mean, std, distinct, length_{min,max,mean},
    size_{min,max,mean}; `stage-{I}-{records,seconds,rate}`, `step-{I}-seconds`.
    Feature cards: `div.feature#feature-{F}[data-feature]`, holding a table row
    `tr[data-split]` per split (`tr.flagged` where a rule of `shift` fired), a
    `figure[data-split]` per chart, and the rules that fired in `#shifts-{F}`, one
    `li[data-split][data-rule]` each.
    Rows: `tr[data-reason]` in `#rejected` (count cell `td[data-value]`), `tr[data-stage]`,
    `tr[data-step]` (the start-up and finishing steps of `timings["steps"]`).
    Charts (`svg[id]`, bars `rect.bar[data-count]`): `hist-{P}-{F}`, `top-{P}-{F}` (bars also
    `[data-value][data-share]`; no `data-count` where the split's statistics did not count the
    value), `shards-{P}-chart`, `label-{P}-chart`; `svg#pipeline-graph` holds
    `g.node[data-node]` and `path.edge[data-from][data-to]`. P, S, F are split, source and
    feature names, as `_id` writes them: letters, digits, `_` and `.` as they are, any other
    character as `:` and the hex of its UTF-8 bytes (`a b` → `a:20b`, `a-b` → `a:2db`, `größe`
    stays `größe`), so that every name has its own id.
    """
    date = manifest.date or str(manifest.created)[:10]
    title = f"{manifest.name} — {date}" if date else manifest.name
    found = _shifts(statistics) if statistics is not None else []
    sections = [
        _warnings(manifest, found),
        _summary(manifest, timings),
        _sources(manifest),
        _splits(manifest, statistics),
        _rejected(manifest, rejected_examples or {}),
        _shards(manifest),
    ]
    if statistics is not None:
        sections.append(_features(manifest, statistics, found))
        sections.append(_label_balance(manifest, statistics))
    if timings is not None:
        sections.append(_timings(timings))
    if graph is not None:
        sections.append(_graph(graph))
    return page(title, "run report", "\n".join(s for s in sections if s))


# --- sections ------------------------------------------------------------------------------


def _warnings(manifest: Manifest, found: list[Shift]) -> str:
    """A banner of what a reader should not miss: a partial dataset, the anomalies of data
    validation, rejected records, an empty dataset or split, fields no feature reads, splits
    whose features differ a lot from train's (`found`). Empty when there is none."""
    read = sum(s.records for s in manifest.sources.values())
    written = sum(s.records for s in manifest.splits.values())
    rejected = manifest.rejected.records
    items = []
    if manifest.limit is not None:
        items.append(
            f"A partial dataset: the first {fmt_int(manifest.limit)} records of each source "
            "at most (<code>etl --limit</code>)."
        )
    validation = manifest.validation
    for i, anomaly in enumerate(validation.anomalies if validation is not None else ()):
        feature = str(anomaly.get("feature", ""))
        link = f'<a href="#{_id("feature", feature)}">{escape(clip(feature))}</a>'
        items.append(
            f'<span class="anomaly" id="anomaly-{i}" data-kind="{escape(str(anomaly["kind"]))}">'
            f"Anomaly of {link} in {escape(str(anomaly.get('split', '')))}: "
            f"{escape(clip(describe(anomaly)))}</span>"
        )
    if not written:
        items.append("No record was written: the dataset is empty.")
    if rejected:
        share = f" ({100 * rejected / read:.1f} % of those read)" if read else ""
        items.append(
            f'{fmt_int(rejected)} records were rejected{share}: see <a href="#rejected">'
            "Rejected records</a>."
        )
    for name in in_split_order(manifest.splits):
        if written and not manifest.splits[name].records:
            items.append(f"Split {escape(name)} holds no record.")
    by_split: dict[str, list[str]] = {}
    for shift in found:
        features = by_split.setdefault(shift.split, [])
        if shift.feature not in features:
            features.append(shift.feature)
    for split, features in by_split.items():
        links = ", ".join(f'<a href="#{_id("feature", f)}">{escape(clip(f))}</a>' for f in features)
        items.append(
            f"Split {escape(split)} differs a lot from {escape(found[0].train)} in "
            f"{_plural(len(features), 'feature')}: {links}."
        )
    for source, entry in manifest.sources.items():
        for field, count in sorted((entry.ignored_fields or {}).items()):
            items.append(
                f"Source {escape(source)}: field <code>{escape(field)}</code> is read by no "
                f"feature ({fmt_int(count)} records hold a value)."
            )
    if not items:
        return ""
    rows = "".join(f"<li>{item}</li>" for item in items)
    return f'<div class="banner" id="warnings"><strong>Check</strong><ul>{rows}</ul></div>'


def _summary(manifest: Manifest, timings: dict | None) -> str:
    read = sum(s.records for s in manifest.sources.values())
    written = sum(s.records for s in manifest.splits.values())
    rejected = manifest.rejected.records
    rows = [("created", "Created", str(manifest.created), manifest.created)]
    if manifest.date:
        rows.append(("date", "Date", manifest.date, manifest.date))
    elapsed = None
    if timings is not None:
        elapsed = timings.get("elapsed_s")
        rows.append(("runner", "Runner", str(timings.get("runner", "")), timings.get("runner")))
        rows.append(("elapsed", "Elapsed", _seconds(elapsed), elapsed))
    rows += [
        ("read", "Records read", fmt_int(read), read),
        ("written", "Records written", fmt_int(written), written),
        ("rejected", "Rejected", fmt_int(rejected), rejected),
        ("duplicates", "Duplicates dropped", fmt_int(manifest.duplicates), manifest.duplicates),
    ]
    if manifest.joined is not None:
        rows.append(("joined", "Joined into others", fmt_int(manifest.joined), manifest.joined))
    if elapsed:
        rate = read / elapsed
        rows.append(("throughput", "Throughput", f"{fmt_int(round(rate))} records/s", rate))
    items = "".join(
        f"<dt>{escape(label)}</dt>"
        f"<dd{attrs(id=_id('summary', key), data_value=raw)}>{escape(text)}</dd>"
        for key, label, text, raw in rows
    )
    extra = "".join(
        f"<dt>{escape(label)}</dt><dd>{escape(value)}</dd>"
        for label, value in (
            ("Label", manifest.label),
            ("Key", manifest.key),
            ("Combine", manifest.combine),
        )
        if value is not None
    )
    return _section("summary", "Summary", f'<dl class="summary">{items}{extra}</dl>')


def _sources(manifest: Manifest) -> str:
    rows = []
    for name, source in manifest.sources.items():
        ignored = source.ignored_fields or {}
        fields = ", ".join(
            f"{escape(clip(field))} "
            f"(<span{attrs(id=_id('source', name, 'ignored', field), data_value=n)}>"
            f"{fmt_int(n)}</span>)"
            for field, n in ignored.items()
        )
        rows.append(
            [
                escape(name),
                escape(source.format),
                _num_cell(_id("source", name, "records"), source.records),
                fields or '<span class="muted">none</span>',
            ]
        )
    table = _table(["source", "format", "records", "ignored fields (records holding one)"],
                   rows, numeric=(2,))  # fmt: skip
    return _section("sources", "Records per source", table)


def _splits(manifest: Manifest, statistics: dict | None) -> str:
    validated = {
        name: s.get("records")
        for name, s in ((statistics or {}).get("splits") or {}).items()
        if s.get("records") is not None
    }
    splits = manifest.splits
    differs = any(validated.get(n, s.records) != s.records for n, s in splits.items())
    header = ["split", "records", "share", "files"]
    if differs:
        header.insert(2, "validated (before dropping duplicates)")
    total = sum(s.records for s in splits.values()) or 1
    rows = []
    for name in in_split_order(splits):
        split = splits[name]
        records = split.records
        row = [
            escape(name),
            _num_cell(_id("split", name, "records"), records),
            f"{100 * records / total:.1f} %",
            fmt_int(len(split.files)),
        ]
        if differs:
            row.insert(2, _num_cell(_id("split", name, "validated"), validated.get(name)))
        rows.append(row)
    numeric = (1, 2, 3, 4) if differs else (1, 2, 3)
    return _section("splits", "Records per split", _table(header, rows, numeric=numeric))


def _rejected(manifest: Manifest, examples: dict[str, list[dict]]) -> str:
    reasons = manifest.rejected.reasons
    if not reasons:
        return _section("rejected", "Rejected records", "<p>No record was rejected.</p>")
    rows = []
    for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        shown = "".join(_example(x) for x in (examples.get(reason) or [])[:MAX_EXAMPLES])
        if shown:
            shown = f"<details><summary>examples</summary>{shown}</details>"
        rows.append(
            f"<tr{attrs(data_reason=reason)}><td>{escape(reason)}</td>"
            f'<td class="n"{attrs(data_value=count)}>{fmt_int(count)}</td><td>{shown}</td></tr>'
        )
    files = ", ".join(escape(f.path) for f in manifest.rejected.files or ())
    body = (
        f"<p>{fmt_int(manifest.rejected.records)} records rejected"
        + (f", written to {files}" if files else "")
        + '.</p><table><thead><tr><th>reason</th><th class="n">records</th><th></th></tr></thead>'
        + "<tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )
    return _section("rejected", "Rejected records", body)


def _example(example: dict) -> str:
    record = example.get("record")
    text = record if isinstance(record, str) else json.dumps(record, ensure_ascii=False)
    where = clip(str(example.get("location", "")))
    return f"<div><code>{escape(where)}</code><pre>{escape(clip(text))}</pre></div>"


def _shards(manifest: Manifest) -> str:
    rows = []
    # one scale for every split's bars: a split of small shards shows them small
    largest = max((f.bytes or 0 for s in manifest.splits.values() for f in s.files), default=0)
    for index, name in enumerate(in_split_order(manifest.splits)):
        split = manifest.splits[name]
        sizes = [f.bytes or 0 for f in split.files]
        cells = [escape(name), _num_cell(_id("shards", name, "count"), len(sizes))]
        cells.append(_bytes_cell(_id("shards", name, "bytes"), sum(sizes)))
        for stat, value in (
            ("min", min(sizes, default=None)),
            ("median", pystats.median(sizes) if sizes else None),
            ("max", max(sizes, default=None)),
        ):
            cells.append(_bytes_cell(_id("shards", name, stat), value))
        cells.append(bar_chart(_id("shards", name, "chart"), sizes, [
            f"{f.path}: {_bytes(f.bytes or 0)}, {fmt_int(f.records or 0)} records"
            for f in split.files
        ], top=largest, css_class=split_class(index)))  # fmt: skip
        rows.append(cells)
    header = ["split", "shards", "total", "smallest", "median", "largest", "shard sizes"]
    return _section("shards", "Shards", _table(header, rows, numeric=(1, 2, 3, 4, 5)))


def _shifts(statistics: dict) -> list[Shift]:
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


def _features(manifest: Manifest, statistics: dict, found: list[Shift]) -> str:
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
    return _section("features", "Feature statistics", intro + "".join(cards))


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
        banner = f'<div class="banner"{attrs(id=_id("shifts", feature))}><ul>{items}</ul></div>'
    return (
        f'<div class="feature"{attrs(id=_id("feature", feature), data_feature=feature)}>'
        f'{banner}<div class="charts">{table}{"".join(charts)}</div></div>'
    )


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
            _stat_span(split, feature, "missing", s.get("missing"))
            + ' <span class="muted">('
            + _stat_span(split, feature, "missing_rate", s.get("missing_rate"),
                         _percent(s.get("missing_rate")))
            + ")</span>"
        )  # fmt: skip
        row = [
            f"<td>{_swatch(index[split])}{escape(split)}</td>",
            _stat_cell(split, feature, "records", s.get("records"), fmt_int(s.get("records"))),
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
    return [_stat_cell(split, feature, k, s.get(k)) for k in ("mean", "std", "min", "max")]


def _string_cells(split: str, feature: str, s: dict) -> list[str]:
    distinct = fmt_int(s.get("distinct"))
    if s.get("distinct") is not None and not s.get("distinct_exact", True):
        distinct = "≈ " + distinct
    length = s.get("length") or {}
    spans = [_stat_span(split, feature, f"length_{k}", length.get(k))
             for k in ("min", "mean", "max")]  # fmt: skip
    return [
        _stat_cell(split, feature, "distinct", s.get("distinct"), distinct),
        f'<td class="n">{" / ".join(spans)}</td>',
    ]


def _size_cells(split: str, feature: str, s: dict) -> list[str]:
    size = s.get("size") or {}
    return [_stat_cell(split, feature, f"size_{k}", size.get(k), _bytes(size.get(k)))
            for k in ("min", "mean", "max")]  # fmt: skip


def _histogram_figures(feature: str, per_split: dict[str, dict], index: dict[str, int]):
    """The splits' histograms of a number, side by side on one scale."""
    splits = list(per_split)
    stats = list(per_split.values())
    last = None
    if stats[0].get("type") == "int":
        last = max((s["max"] for s in stats if s.get("max") is not None), default=None)
    charts = histograms(
        [_id("hist", split, feature) for split in splits],
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
    rows = {}
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
            chart = share_bars(_id("top", split, feature), rows[split], scale, labels=i == 0,
                               css_class=split_class(index[split]), bar_w=bar_w)  # fmt: skip
        caption = ""
        if s.get("top") and not s.get("distinct_exact", True):  # beyond the exact counts
            caption = (
                f' <span class="muted"{attrs(id=_id("sampled", split, feature))} title="the '
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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _label_balance(manifest: Manifest, statistics: dict) -> str:
    label = manifest.label
    if not label:
        return ""
    splits = statistics.get("splits") or {}
    order = in_split_order(splits)
    index = {split: i for i, split in enumerate(order)}
    per_split = {split: (splits[split].get("features") or {}).get(label) for split in order}
    per_split = {split: s for split, s in per_split.items() if s is not None}
    if not per_split:
        return ""
    numeric = next(iter(per_split.values())).get("type") in NUMBER_TYPES
    if numeric:
        charts = histograms(
            [_id("label", split, "chart") for split in per_split],
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
            charts.append(top_values(_id("label", split, "chart"), top, total=s.get("values"),
                                     css_class=split_class(index[split])))  # fmt: skip
    parts = [
        f'<figure class="{split_class(index[split])}"{attrs(id=_id("label", split))}>'
        f"<figcaption>{escape(split)}</figcaption>{chart}</figure>"
        for split, chart in zip(per_split, charts)
    ]
    body = f'<p>Label: <code>{escape(label)}</code></p><div class="charts">{"".join(parts)}</div>'
    return _section("label-balance", "Label balance", body)


def _label_order(manifest: Manifest, per_split: dict[str, dict]) -> list[str]:
    """One order of the label's values for every split: the config's `values`, else the most
    frequent first in the first split (train), then the values only other splits hold."""
    feature = manifest.features.get(manifest.label)
    declared = [str(v) for v in feature.values] if feature and feature.values else []
    order = list(declared)
    for s in per_split.values():
        ranked = sorted(s.get("top") or [], key=lambda t: (-t.get("count", 0), str(t["value"])))
        order += [str(t["value"]) for t in ranked if str(t["value"]) not in order]
    return order


def _timings(timings: dict) -> str:
    rows = []
    for i, stage in enumerate(timings.get("stages") or []):
        records, seconds = stage.get("records"), stage.get("seconds")
        rate = records / seconds if records is not None and seconds else None
        rows.append(
            f"<tr{attrs(data_stage=stage.get('name', ''))}><td>{escape(stage.get('name', ''))}</td>"
            + _num_cell(_id("stage", str(i), "records"), records)
            + f'<td class="n"{attrs(id=_id("stage", str(i), "seconds"), data_value=seconds)}>'
            f"{escape(_seconds(seconds))}</td>"
            + f'<td class="n"{attrs(id=_id("stage", str(i), "rate"), data_value=rate)}>'
            f"{escape(fmt_int(round(rate)) if rate is not None else '–')}</td></tr>"
        )
    steps = []
    for i, step in enumerate(timings.get("steps") or []):
        seconds = step.get("seconds")
        steps.append(
            f"<tr{attrs(data_step=step.get('name', ''))}><td>{escape(step.get('name', ''))}</td>"
            f'<td class="n"{attrs(id=_id("step", str(i), "seconds"), data_value=seconds)}>'
            f"{escape(_seconds(seconds))}</td></tr>"
        )
    stages = (
        '<table><thead><tr><th>stage</th><th class="n">records</th><th class="n">seconds</th>'
        '<th class="n">records/s</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table>"
    )
    fixed = ""
    if steps:
        fixed = (
            '<table><thead><tr><th>fixed cost: start-up and finishing step</th><th class="n">'
            "seconds</th></tr></thead><tbody>" + "".join(steps) + "</tbody></table>"
        )
    body = (
        f"<p>Runner: {escape(timings.get('runner', ''))}; elapsed "
        f"{escape(_seconds(timings.get('elapsed_s')))}. Steps the workers timed are summed over "
        f'them.</p><div class="charts">{stages}{fixed}</div>'
    )
    return _section("timings", "Timings", body)


def _graph(graph: dict) -> str:
    return _section("graph", "Pipeline graph", graph_svg(graph))


# --- charts --------------------------------------------------------------------------------


def _utf8(text: str) -> bytes:
    # surrogatepass: a lone surrogate (undecodable input) still has bytes to count and escape
    return text.encode("utf-8", "surrogatepass")


def _id(*parts: str) -> str:
    """A stable element id: the parts, escaped by `_id_part`, joined by '-'.

    Distinct parts give distinct ids: a part never holds '-' (it is escaped), and the escape
    is reversible, so `a b`, `a-b` and `a_b`, or `größe` and `größe_`, never share an id (the
    old rule, every character outside [A-Za-z0-9_.] as '_', gave them one).
    """
    return "-".join(_id_part(str(p)) for p in parts)


def _id_part(name: str) -> str:
    """Letters, digits (of any script), '_' and '.' as they are; any other character as ':'
    and the two hex digits of each of its UTF-8 bytes. An escaped name longer than
    MAX_ID_PART_CHARS becomes its start, '~' (never in an escaped name) and a digest."""
    if name.isascii() and name.replace("_", "a").replace(".", "a").isalnum():
        out = name  # the common case, e.g. bill_length_mm
    else:
        out = "".join(
            c if c.isalnum() or c in "_." else "".join(f":{b:02x}" for b in _utf8(c)) for c in name
        )
    if len(out) > MAX_ID_PART_CHARS:
        digest = hashlib.sha256(_utf8(name)).hexdigest()[:16]
        out = f"{out[: MAX_ID_PART_CHARS // 2]}~{digest}"
    return out


def _section(section_id: str, title: str, body: str) -> str:
    return f'<section id="{section_id}"><h2>{escape(title)}</h2>\n{body}\n</section>'


def _table(header: list[str], rows: Iterable[list[str]], numeric: tuple[int, ...] = ()) -> str:
    """A table of already-escaped cells; cells that are whole `<td ...>` elements stay as is."""

    def cell(i: int, html_: str) -> str:
        if html_.startswith("<td"):
            return html_
        return f'<td class="n">{html_}</td>' if i in numeric else f"<td>{html_}</td>"

    head = "".join(
        f'<th class="n">{escape(h)}</th>' if i in numeric else f"<th>{escape(h)}</th>"
        for i, h in enumerate(header)
    )
    body = "".join(
        "<tr>" + "".join(cell(i, c) for i, c in enumerate(row)) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _num_cell(element_id: str, value: Any) -> str:
    return f'<td class="n"{attrs(id=element_id, data_value=value)}>{escape(fmt_int(value))}</td>'


def _bytes_cell(element_id: str, value: Any) -> str:
    return f'<td class="n"{attrs(id=element_id, data_value=value)}>{escape(_bytes(value))}</td>'


def _stat_cell(split: str, feature: str, stat: str, value: Any, text: str | None = None) -> str:
    shown = text if text is not None else _number(value)
    element_id = _id("stat", split, feature, stat)
    return f'<td class="n"{attrs(id=element_id, data_value=value)}>{escape(shown)}</td>'


def _stat_span(split: str, feature: str, stat: str, value: Any, text: str | None = None) -> str:
    shown = text if text is not None else _number(value)
    element_id = _id("stat", split, feature, stat)
    return f"<span{attrs(id=element_id, data_value=value)}>{escape(shown)}</span>"


def _number(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "–" if value is None else str(value)
    return fmt_float(value)  # no thousands separator: a year reads 2007, not 2,007


def _percent(rate: float | None) -> str:
    return "–" if rate is None else f"{100 * rate:.2f} %"


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 120:
        return f"{int(value // 60)} min {value % 60:.0f} s"
    return f"{value:.1f} s"


def _bytes(value: float | None) -> str:
    if value is None:
        return "–"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(value) < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"
