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

Longer than most modules because it is one page: its sections, each a small function of the
manifest and statistics, and the page's styles; its charts are `pipelines.report.svg`.
"""

from __future__ import annotations

import hashlib
import json
import statistics as pystats
from collections.abc import Iterable
from typing import Any

from pipelines.report.svg import (
    attrs,
    bar_chart,
    clip,
    escape,
    fmt_float,
    fmt_int,
    graph_svg,
    histogram,
    top_values,
)
from transforms.contract.manifest import Manifest
from transforms.contract.report import page

NUMBER_TYPES = ("int", "float")
SIZE_TYPES = ("bytes", "image")
MAX_EXAMPLES = 5  # rejected records shown per reason
MAX_ID_PART_CHARS = 200  # of one name in an element id, escaped; longer ones end in a digest


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
    missing, missing_rate, values, min, max, mean, std, distinct, length_{min,max,mean},
    size_{min,max,mean}; `stage-{I}-{records,seconds,rate}`, `step-{I}-seconds`.
    Rows: `tr[data-reason]` in `#rejected` (count cell `td[data-value]`), `tr[data-stage]`,
    `tr[data-step]` (the start-up and finishing steps of `timings["steps"]`).
    Charts (`svg[id]`, bars `rect.bar[data-count]`): `hist-{P}-{F}`, `top-{P}-{F}`,
    `shards-{P}-chart`, `label-{P}-chart`; `svg#pipeline-graph` holds `g.node[data-node]` and
    `path.edge[data-from][data-to]`. P, S, F are split, source and feature names, as `_id`
    writes them: letters, digits, `_` and `.` as they are, any other character as `:` and the
    hex of its UTF-8 bytes (`a b` → `a:20b`, `a-b` → `a:2db`, `größe` stays `größe`), so that
    every name has its own id.
    """
    date = manifest.date or str(manifest.created)[:10]
    title = f"{manifest.name} — {date}" if date else manifest.name
    sections = [
        _warnings(manifest),
        _summary(manifest, timings),
        _sources(manifest),
        _splits(manifest, statistics),
        _rejected(manifest, rejected_examples or {}),
        _shards(manifest),
    ]
    if statistics is not None:
        sections.append(_features(manifest, statistics))
        sections.append(_label_balance(manifest, statistics))
    if timings is not None:
        sections.append(_timings(timings))
    if graph is not None:
        sections.append(_graph(graph))
    return page(title, "run report", "\n".join(s for s in sections if s))


# --- sections ------------------------------------------------------------------------------

_SPLIT_ORDER = ("train", "eval", "validation", "test")


def _in_split_order(names: Iterable[str]) -> list[str]:
    """Split names as a reader expects them: train, eval (validation), test, then the others in
    their order."""
    names = list(names)
    known = [n for n in _SPLIT_ORDER if n in names]
    return known + [n for n in names if n not in _SPLIT_ORDER]


def _warnings(manifest: Manifest) -> str:
    """A banner of what a reader should not miss: rejected records, an empty dataset or split,
    fields no feature reads. Empty when there is none."""
    read = sum(s.records for s in manifest.sources.values())
    written = sum(s.records for s in manifest.splits.values())
    rejected = manifest.rejected.records
    items = []
    if not written:
        items.append("No record was written: the dataset is empty.")
    if rejected:
        share = f" ({100 * rejected / read:.1f} % of those read)" if read else ""
        items.append(
            f'{fmt_int(rejected)} records were rejected{share}: see <a href="#rejected">'
            "Rejected records</a>."
        )
    for name in _in_split_order(manifest.splits):
        if written and not manifest.splits[name].records:
            items.append(f"Split {escape(name)} holds no record.")
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
    for name in _in_split_order(splits):
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
        + '.</p><table><tr><th>reason</th><th class="n">records</th><th></th></tr>'
        + "".join(rows)
        + "</table>"
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
    for name in _in_split_order(manifest.splits):
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
        ], top=largest))  # fmt: skip
        rows.append(cells)
    header = ["split", "shards", "total", "smallest", "median", "largest", "shard sizes"]
    return _section("shards", "Shards", _table(header, rows, numeric=(1, 2, 3, 4, 5)))


def _features(manifest: Manifest, statistics: dict) -> str:
    parts = []
    splits = statistics.get("splits") or {}
    for split in _in_split_order(splits):
        stats = splits[split]
        features = stats.get("features") or {}
        validated = stats.get("records")
        entry = manifest.splits.get(split)
        written = entry.records if entry is not None else None
        counts = f"{fmt_int(validated)} records validated"
        if written is not None and written != validated:
            counts += f", {fmt_int(written)} written after dropping duplicates"
        parts.append(f"<h3>{escape(split)}</h3><p>{counts}.</p>")
        numbers = {f: s for f, s in features.items() if s.get("type") in NUMBER_TYPES}
        strings = {f: s for f, s in features.items() if s.get("type") == "string"}
        sizes = {f: s for f, s in features.items() if s.get("type") in SIZE_TYPES}
        if numbers:
            parts.append(_number_table(split, numbers))
        if strings:
            parts.append(_string_table(split, strings))
        if sizes:
            parts.append(_size_table(split, sizes))
    return _section("features", "Feature statistics", "".join(parts))


def _common_cells(split: str, feature: str, s: dict) -> list[str]:
    return [
        escape(feature),
        escape(s.get("type", "")),
        _stat_cell(split, feature, "missing", s.get("missing")),
        _stat_cell(split, feature, "missing_rate", s.get("missing_rate"),
                   _percent(s.get("missing_rate"))),
    ]  # fmt: skip


def _number_table(split: str, features: dict[str, dict]) -> str:
    rows = []
    for feature, s in features.items():
        cells = _common_cells(split, feature, s)
        cells += [_stat_cell(split, feature, k, s.get(k)) for k in ("min", "max", "mean", "std")]
        last = s.get("max") if s.get("type") == "int" else None
        cells.append(histogram(_id("hist", split, feature), s.get("histogram") or [], last))
        rows.append(cells)
    header = ["number", "type", "missing", "missing rate", "min", "max", "mean", "std",
              "histogram"]  # fmt: skip
    return _table(header, rows, numeric=(2, 3, 4, 5, 6, 7))


def _string_table(split: str, features: dict[str, dict]) -> str:
    rows = []
    for feature, s in features.items():
        cells = _common_cells(split, feature, s)
        distinct = fmt_int(s.get("distinct"))
        if s.get("distinct") is not None and not s.get("distinct_exact", True):
            distinct = "≈ " + distinct
        cells.append(_stat_cell(split, feature, "distinct", s.get("distinct"), distinct))
        length = s.get("length") or {}
        spans = [_stat_span(split, feature, f"length_{k}", length.get(k))
                 for k in ("min", "mean", "max")]  # fmt: skip
        cells.append(" / ".join(spans))
        top = s.get("top") or []
        chart = top_values(_id("top", split, feature), top)
        if top and not s.get("distinct_exact", True):  # beyond statistics' exact counts
            sampled = _id("sampled", split, feature)
            chart = (
                f'<span class="muted"{attrs(id=sampled)}>of a sample of the values</span> ' + chart
            )
        cells.append(chart)
        rows.append(cells)
    header = ["string", "type", "missing", "missing rate", "distinct", "length min / mean / max",
              "top values"]  # fmt: skip
    return _table(header, rows, numeric=(2, 3, 4))


def _size_table(split: str, features: dict[str, dict]) -> str:
    rows = []
    for feature, s in features.items():
        cells = _common_cells(split, feature, s)
        size = s.get("size") or {}
        cells += [_stat_cell(split, feature, f"size_{k}", size.get(k), _bytes(size.get(k)))
                  for k in ("min", "mean", "max")]  # fmt: skip
        rows.append(cells)
    header = ["bytes", "type", "missing", "missing rate", "size min", "size mean", "size max"]
    return _table(header, rows, numeric=(2, 3, 4, 5, 6))


def _label_balance(manifest: Manifest, statistics: dict) -> str:
    label = manifest.label
    if not label:
        return ""
    splits = statistics.get("splits") or {}
    per_split = {
        split: (splits[split].get("features") or {}).get(label) for split in _in_split_order(splits)
    }
    per_split = {split: s for split, s in per_split.items() if s is not None}
    order = _label_order(manifest, per_split)
    parts = []
    for split, s in per_split.items():
        chart_id = _id("label", split, "chart")
        if s.get("type") in NUMBER_TYPES:
            last = s.get("max") if s.get("type") == "int" else None
            chart = histogram(chart_id, s.get("histogram") or [], last)
        else:
            counts = {str(t.get("value")): t.get("count", 0) for t in s.get("top") or []}
            top = [{"value": v, "count": counts.get(v, 0)} for v in order]
            chart = top_values(chart_id, top, total=s.get("values"))
        parts.append(f"<div{attrs(id=_id('label', split))}><h3>{escape(split)}</h3>{chart}</div>")
    if not parts:
        return ""
    body = f"<p>Label: <code>{escape(label)}</code></p>" + "".join(parts)
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
    body = (
        f"<p>Runner: {escape(timings.get('runner', ''))}; elapsed "
        f"{escape(_seconds(timings.get('elapsed_s')))}.</p>"
        '<table><tr><th>stage</th><th class="n">records</th><th class="n">seconds</th>'
        '<th class="n">records/s</th></tr>' + "".join(rows) + "</table>"
    )
    if steps:
        body += (
            "<p>Fixed costs: the start-up and the finishing steps (the steps the workers timed "
            "are summed over them).</p>"
            '<table><tr><th>step</th><th class="n">seconds</th></tr>' + "".join(steps) + "</table>"
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
    return f"<table><tr>{head}</tr>{body}</table>"


def _num_cell(element_id: str, value: Any) -> str:
    return f'<td class="n"{attrs(id=element_id, data_value=value)}>{escape(fmt_int(value))}</td>'


def _bytes_cell(element_id: str, value: Any) -> str:
    return f'<td class="n"{attrs(id=element_id, data_value=value)}>{escape(_bytes(value))}</td>'


def _stat_cell(split: str, feature: str, stat: str, value: Any, text: str | None = None) -> str:
    shown = text if text is not None else _number(value)
    element_id = _id("stat", split, feature, stat)
    return f'<td class="n"{attrs(id=element_id, data_value=value)}>{escape(shown)}</td>'


def _stat_span(split: str, feature: str, stat: str, value: Any) -> str:
    element_id = _id("stat", split, feature, stat)
    return f"<span{attrs(id=element_id, data_value=value)}>{escape(_number(value))}</span>"


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
