"""The ETL's run report: one self-contained HTML page (OUTPUT/report.html) describing a run.

`render` is a pure function of the dataset's manifest (the contract's typed `Manifest`, read
through its attributes), its statistics (statistics.json, as the contract's typed `Statistics`),
the pipeline graph, the stage timings and a few rejected records per reason. The page has no
external CSS, scripts, fonts or images: it opens offline, from a bucket or an e-mail attachment.
Charts are hand-written inline SVG (`pipelines.report.svg`). Every text from the data is
HTML-escaped, and cut to `svg.MAX_TEXT_CHARS` characters with its full size noted (`clip`), so
that the page stays small whatever the data. Numbers that a reader (or a test) looks up carry
stable ids, e.g. `id="split-train-records"`, and the raw value in `data-value`; the ids are
listed in `render`'s docstring and made by `element_id`, one id per name.
Feature statistics are one card per feature with every split side by side (train first, the
splits in one colour each, `transforms.ui.style`): a table with a row per split, and the
splits' charts on one scale. A split that differs a lot from train by the rules of
`pipelines.report.shift` is flagged in the card and in the page's warning banner.

Its sections are small functions of the manifest and statistics; the feature cards and the label
balance are `pipelines.report.features`, element ids, tables and cells `pipelines.report.cells`,
the charts `pipelines.report.svg`.
"""

from __future__ import annotations

import json
import statistics as pystats
from typing import Any

from pipelines.report.cells import (
    bytes_cell,
    fmt_bytes,
    fmt_seconds,
    html_section,
    html_table,
    make_id,
    num_cell,
    plural,
)
from pipelines.report.features import (
    features_section,
    found_shifts,
    label_balance_section,
)
from pipelines.report.shift import (
    Shift,
)
from pipelines.report.svg import (
    attrs,
    bar_chart,
    clip,
    escape,
    fmt_int,
    graph_svg,
)
from transforms.contract.facts import REPEATED_SHARE, RowFacts
from transforms.contract.manifest import Manifest
from transforms.contract.statistics import Statistics
from transforms.ui.style import in_split_order, page, split_class
from transforms.validation.check import describe

MAX_EXAMPLES = 5  # rejected records shown per reason


_IGNORED_SHOWN = 10  # ignored fields of a source the report's notes name, one per line


def render(
    manifest: Manifest,
    statistics: Statistics | None = None,
    graph: dict[str, Any] | None = None,
    timings: dict[str, Any] | None = None,
    rejected_examples: dict[str, list[dict[str, Any]]] | None = None,
    rows: RowFacts | None = None,
) -> str:
    """The run report as one HTML page (`rows`: facts.json's repeated rows).

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
    feature names, as `element_id` writes them: letters, digits, `_` and `.` as they are, any other
    character as `:` and the hex of its UTF-8 bytes (`a b` → `a:20b`, `a-b` → `a:2db`, `größe`
    stays `größe`), so that every name has its own id.
    """
    date = manifest.date or str(manifest.created)[:10]
    title = f"{manifest.name} — {date}" if date else manifest.name
    found = found_shifts(statistics) if statistics is not None else []
    sections = [
        _warnings(manifest, found, rows),
        _summary(manifest, timings),
        _sources(manifest),
        _splits(manifest, statistics),
        _rejected(manifest, rejected_examples or {}),
        _shards(manifest),
    ]
    if statistics is not None:
        sections.append(features_section(manifest, statistics, found))
        sections.append(label_balance_section(manifest, statistics))
    if timings is not None:
        sections.append(_timings(timings))
    if graph is not None:
        sections.append(_graph(graph))
    return page(title, "run report", "\n".join(s for s in sections if s))


# --- sections ------------------------------------------------------------------------------


def _warnings(manifest: Manifest, found: list[Shift], repeated: RowFacts | None = None) -> str:
    """A banner of what a reader should not miss: a partial dataset, the anomalies of data
    validation, rejected records, an empty dataset or split, rows that repeat (the facts), fields
    no feature reads, splits whose features differ a lot from train's (`found`). Empty when there
    is none."""
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
        link = f'<a href="#{make_id("feature", feature)}">{escape(clip(feature))}</a>'
        # an anomaly of no feature (rejected_rate) is the run's own: its records read
        of = f"{link} in {escape(str(anomaly.get('split', '')))}" if feature else "the run"
        items.append(
            f'<span class="anomaly" id="anomaly-{i}" data-kind="{escape(str(anomaly["kind"]))}">'
            f"Anomaly of {of}: {escape(clip(describe(anomaly)))}</span>"
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
    if (
        repeated is not None
        and repeated.records
        and (repeated.repeated >= REPEATED_SHARE * repeated.records)
    ):
        key = (
            ""
            if manifest.key is not None
            else " Where copies are one entity (a person, a respondent), give the config a "
            "<code>key</code> so that they land in one split."
        )
        n, total = repeated.repeated, repeated.records
        items.append(
            f'<span id="repeated-rows" data-value="{n}">{fmt_int(n)} records '
            f"({100 * n / total:.1f} %) repeat another's features and label "
            f"({fmt_int(repeated.repeated_rows)} distinct rows); "
            f"{fmt_int(repeated.conflicting)} share their features with a record of another "
            f"label; {fmt_int(repeated.across_splits)} have a copy in another split.{key}</span>"
        )
    by_split: dict[str, list[str]] = {}
    for shift in found:
        features = by_split.setdefault(shift.split, [])
        if shift.feature not in features:
            features.append(shift.feature)
    for split, features in by_split.items():
        links = ", ".join(
            f'<a href="#{make_id("feature", f)}">{escape(clip(f))}</a>' for f in features
        )
        items.append(
            f"Split {escape(split)} differs a lot from {escape(found[0].train)} in "
            f"{plural(len(features), 'feature')}: {links}."
        )
    for source, entry in manifest.sources.items():
        ignored = sorted((entry.ignored_fields or {}).items())
        for field, count in ignored[:_IGNORED_SHOWN]:
            items.append(
                f"Source {escape(source)}: field <code>{escape(clip(field))}</code> is read by "
                f"no feature ({fmt_int(count)} records hold a value)."
            )
        more = len(ignored) - _IGNORED_SHOWN + (entry.ignored_fields_unlisted or 0)
        if more > 0:
            items.append(
                f"Source {escape(source)}: {plural(more, 'more field')} read by no feature "
                "(see the Sources table and the manifest)."
            )
    if not items:
        return ""
    rows = "".join(f"<li>{item}</li>" for item in items)
    return f'<div class="banner" id="warnings"><strong>Check</strong><ul>{rows}</ul></div>'


def _summary(manifest: Manifest, timings: dict | None) -> str:
    read = sum(s.records for s in manifest.sources.values())
    written = sum(s.records for s in manifest.splits.values())
    rejected = manifest.rejected.records
    # (id, label, text shown, raw value for data-value)
    rows: list[tuple[str, str, str, object]] = [
        ("created", "Created", str(manifest.created), manifest.created)
    ]
    if manifest.date:
        rows.append(("date", "Date", manifest.date, manifest.date))
    elapsed = None
    if timings is not None:
        elapsed = timings.get("elapsed_s")
        rows.append(("runner", "Runner", str(timings.get("runner", "")), timings.get("runner")))
        rows.append(("elapsed", "Elapsed", fmt_seconds(elapsed), elapsed))
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
        f"<dd{attrs(id=make_id('summary', key), data_value=raw)}>{escape(text)}</dd>"
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
    return html_section("summary", "Summary", f'<dl class="summary">{items}{extra}</dl>')


def _sources(manifest: Manifest) -> str:
    rows = []
    for name, source in manifest.sources.items():
        ignored = source.ignored_fields or {}
        fields = ", ".join(
            f"{escape(clip(field))} "
            f"(<span{attrs(id=make_id('source', name, 'ignored', field), data_value=n)}>"
            f"{fmt_int(n)}</span>)"
            for field, n in ignored.items()
        )
        if source.ignored_fields_unlisted:
            fields += f" and {fmt_int(source.ignored_fields_unlisted)} more"
        rows.append(
            [
                escape(name),
                escape(source.format),
                num_cell(make_id("source", name, "records"), source.records),
                fields or '<span class="muted">none</span>',
            ]
        )
    table = html_table(["source", "format", "records", "ignored fields (records holding one)"],
                   rows, numeric=(2,))  # fmt: skip
    return html_section("sources", "Records per source", table)


def _splits(manifest: Manifest, statistics: Statistics | None) -> str:
    counted = statistics.splits if statistics is not None else {}
    validated = {name: s.records for name, s in counted.items()}
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
            num_cell(make_id("split", name, "records"), records),
            f"{100 * records / total:.1f} %",
            fmt_int(len(split.files)),
        ]
        if differs:
            row.insert(2, num_cell(make_id("split", name, "validated"), validated.get(name)))
        rows.append(row)
    numeric = (1, 2, 3, 4) if differs else (1, 2, 3)
    return html_section("splits", "Records per split", html_table(header, rows, numeric=numeric))


def _rejected(manifest: Manifest, examples: dict[str, list[dict]]) -> str:
    reasons = manifest.rejected.reasons
    if not reasons:
        return html_section("rejected", "Rejected records", "<p>No record was rejected.</p>")
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
    return html_section("rejected", "Rejected records", body)


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
        cells = [escape(name), num_cell(make_id("shards", name, "count"), len(sizes))]
        cells.append(bytes_cell(make_id("shards", name, "bytes"), sum(sizes)))
        for stat, value in (
            ("min", min(sizes, default=None)),
            ("median", pystats.median(sizes) if sizes else None),
            ("max", max(sizes, default=None)),
        ):
            cells.append(bytes_cell(make_id("shards", name, stat), value))
        cells.append(bar_chart(make_id("shards", name, "chart"), sizes, [
            f"{f.path}: {fmt_bytes(f.bytes or 0)}, {fmt_int(f.records or 0)} records"
            for f in split.files
        ], top=largest, css_class=split_class(index)))  # fmt: skip
        rows.append(cells)
    header = ["split", "shards", "total", "smallest", "median", "largest", "shard sizes"]
    return html_section("shards", "Shards", html_table(header, rows, numeric=(1, 2, 3, 4, 5)))


def _timings(timings: dict) -> str:
    rows = []
    for i, stage in enumerate(timings.get("stages") or []):
        records, seconds = stage.get("records"), stage.get("seconds")
        rate = records / seconds if records is not None and seconds else None
        rows.append(
            f"<tr{attrs(data_stage=stage.get('name', ''))}><td>{escape(stage.get('name', ''))}</td>"
            + num_cell(make_id("stage", str(i), "records"), records)
            + f'<td class="n"{attrs(id=make_id("stage", str(i), "seconds"), data_value=seconds)}>'
            f"{escape(fmt_seconds(seconds))}</td>"
            + f'<td class="n"{attrs(id=make_id("stage", str(i), "rate"), data_value=rate)}>'
            f"{escape(fmt_int(round(rate)) if rate is not None else '–')}</td></tr>"
        )
    steps = []
    for i, step in enumerate(timings.get("steps") or []):
        seconds = step.get("seconds")
        steps.append(
            f"<tr{attrs(data_step=step.get('name', ''))}><td>{escape(step.get('name', ''))}</td>"
            f'<td class="n"{attrs(id=make_id("step", str(i), "seconds"), data_value=seconds)}>'
            f"{escape(fmt_seconds(seconds))}</td></tr>"
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
        f"{escape(fmt_seconds(timings.get('elapsed_s')))}. Steps the workers timed are summed over "
        f'them.</p><div class="charts">{stages}{fixed}</div>'
    )
    return html_section("timings", "Timings", body)


def _graph(graph: dict) -> str:
    return html_section("graph", "Pipeline graph", graph_svg(graph))
