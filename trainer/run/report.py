"""The run report: per-epoch history in MODEL_DIR/history.csv and one page, MODEL_DIR/report.html.

During training the chief appends one row per epoch to a history.csv beside the checkpoints
(`HistoryLogger`, a Keras CSVLogger that also records the epoch's training examples per second;
trainer.run.fit.history_file), so a resumed run (the same --model-dir, more --epochs) adds its
epochs to those of the runs before it. At the end, `render` makes metrics.json, the history and
a summary of the manifest into a single self-contained HTML page: inline CSS and hand-written
SVG charts, no scripts, no external files, so it opens offline and can be copied anywhere.
trainer.task publishes the history and the page into MODEL_DIR whole (trainer.run.modeldir). Files
are read and written with tf.io.gfile, so local folders and gs:// work alike.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Sequence
from typing import TypeGuard

import tensorflow as tf
import tf_keras

from trainer.dataset.manifest import Manifest, read_file
from transforms.ui.safe import for_html
from transforms.ui.style import SERIES, in_split_order, page

HISTORY = "history.csv"
REPORT = "report.html"
RATE = "examples_per_sec"  # the history column of the epoch's training examples per second

Number = float | int | None


class HistoryLogger(tf_keras.callbacks.CSVLogger):
    """Appends each epoch's logs and its training examples per second to a CSV file.

    `rate` returns the examples per second of the epoch that just ended (it is called at the
    end of each epoch). The logs Keras passes on are left untouched, so the rate does not
    show up in model.fit's History. CSVLogger opens the file with tf.io.gfile in append mode;
    on gs:// TensorFlow appends by uploading the whole object again at every epoch's flush,
    which is cheap for a file of one short row per epoch.
    """

    def __init__(self, path: str, rate: Callable[[], float]):
        super().__init__(path, append=True)
        self._rate = rate

    def on_train_begin(self, logs=None):
        # the model folder may not exist yet (Vertex AI's AIP_MODEL_DIR is created by the run)
        tf.io.gfile.makedirs(os.path.dirname(self.filename))
        super().on_train_begin(logs)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, {**(logs or {}), RATE: self._rate()})


def summarize_manifest(manifest: Manifest) -> dict:
    """The few facts about the dataset the report shows."""
    return {
        "name": manifest.name,
        "label": manifest.label,
        "features": len(manifest.features),
        "compression": manifest.compression,
        "splits": {name: manifest.splits[name].records for name in in_split_order(manifest.splits)},
        "rejected_records": manifest.rejected.records,
    }


def read_history(path: str) -> list[dict]:
    """The rows of a history.csv, one per epoch in epoch order; [] when there is no file.

    Values are floats (None where an epoch has none); `epoch` is Keras's 0-based index. When
    an epoch was recorded twice (a run killed between the row and its checkpoint), the later
    row wins.
    """
    if not tf.io.gfile.exists(path):
        return []
    text = read_file(path, 256 << 20, None, "a training run").decode("utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    by_epoch = {}
    for row in rows:
        values = {k: _float(v) for k, v in row.items() if k != "epoch"}
        by_epoch[int(row["epoch"])] = {"epoch": int(row["epoch"]), **values}
    return [by_epoch[e] for e in sorted(by_epoch)]


def render(metrics: dict, history: list[dict], manifest_summary: dict | None = None) -> str:
    """One self-contained HTML page: the run summary, final metrics, charts and epoch table.

    `metrics` is what metrics.json holds, `history` what `read_history` returns.
    """
    title = f"Training run on {metrics.get('dataset', '?')}"
    sections = [_warnings(metrics), _summary(metrics), _final_metrics(metrics)]
    if metrics.get("eval_classes"):
        sections.append(_classes(metrics["eval_classes"]))
    if "model_inputs" in metrics:
        sections.append(_model_inputs(metrics))
    if manifest_summary:
        sections.append(_dataset(manifest_summary))
    if history:
        sections.append(_charts(history))
        sections.append(_epoch_table(history))
    else:
        sections.append("<p>No per-epoch history was recorded (no history.csv).</p>")
    return page(title, "training report", "\n".join(s for s in sections if s))


# Chart geometry (SVG user units) and series colours (the ETL report's): train solid blue,
# validation dashed red.
_W, _H = 560, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 34, 44
_TRAIN, _VAL, _RATE_STYLE = SERIES


def _warnings(metrics: dict) -> str:
    """The banner of what a reader should not miss (the ETL report's): the run's warnings
    (trainer.run.evaluate.warnings_of: no better than the baseline, overfitting, classes never
    predicted), corrupt records the input skipped and the files they were in. Empty when there
    is none."""
    skipped, files = metrics.get("skipped_records"), metrics.get("corrupt_files") or []
    items = list(metrics.get("warnings") or [])
    if skipped or files:
        text = f"{_fmt(skipped or 0)} corrupt records were skipped"
        if files:
            text += f", in {len(files)} file{'s' if len(files) > 1 else ''}: " + ", ".join(files)
        items.append(text)
    if not items:
        return ""
    listed = "".join(f"<li>{_esc(item)}.</li>" for item in items)
    return f'<div class="banner" id="warnings"><strong>Check</strong><ul>{listed}</ul></div>'


def _summary(metrics: dict) -> str:
    epochs, first = metrics.get("epochs"), metrics.get("initial_epoch") or 0
    # the epochs truly trained (early stopping ends a run before its cap, `epochs`)
    last = metrics.get("epochs_trained", epochs)
    if last is not None and first >= last:
        this_run = "none: all were done by earlier runs"
    else:
        this_run = f"{first + 1} to {last}"
    rows = [  # (heading, metrics.json key: the cell's data-key, value)
        ("Dataset", "dataset", metrics.get("dataset")),
        ("Label", "label", metrics.get("label")),
        ("Task", "task", metrics.get("task")),
        ("Strategy", "strategy", metrics.get("strategy")),
        ("Replicas", "replicas", metrics.get("replicas")),
        ("Epochs at most" if metrics.get("early_stopping") else "Epochs", "epochs", epochs),
        ("Epochs trained by this run", "this_run", this_run),
        ("Steps per epoch", "steps_per_epoch", metrics.get("steps_per_epoch")),
        ("Steps in all", "steps", metrics.get("steps")),
        ("Global batch size", "batch_size", metrics.get("batch_size")),
        ("Examples/s (this run)", RATE, metrics.get(RATE)),
    ]
    if "epochs_trained" in metrics:
        rows.insert(6, ("Epochs trained in all", "epochs_trained", metrics["epochs_trained"]))
    if metrics.get("skipped_records"):
        rows.append(("Corrupt records skipped", "skipped_records", metrics["skipped_records"]))
    for heading, key in (
        ("XLA (jit_compile)", "jit_compile"),
        ("Mixed precision", "mixed_precision"),
        ("Steps per execution", "steps_per_execution"),
    ):
        if key in metrics:
            rows.append((heading, key, metrics[key]))
    body = "".join(f"<tr><th>{_esc(name)}</th>{_cell(v, key)}</tr>" for name, key, v in rows)
    return f'<h2>Run</h2>\n<table class="summary">{body}</table>'


def _final_metrics(metrics: dict) -> str:
    """A row per metric, a column per split (train, eval, and test where it was evaluated)."""
    splits = in_split_order(s for s in ("train", "eval", "test") if s in metrics)
    splits = [s for s in splits if s != "test" or metrics["test"]]
    values = {s: metrics.get(s) or {} for s in splits}
    names = sorted({n for v in values.values() for n in v}, key=_metric_order)
    if not names:
        return "<h2>Final metrics</h2>\n<p>None recorded.</p>"
    rows = "".join(
        f"<tr><td>{_esc(n)}</td>"
        + "".join(_cell(values[s].get(n), f"{s}.{n}") for s in splits)
        + "</tr>"
        for n in names
    )
    head = (
        "<thead><tr><th>metric</th>"
        + "".join(f'<th class="n">{_esc(s)}</th>' for s in splits)
        + "</tr></thead>"
    )
    return f'<h2>Final metrics</h2>\n<table class="final">{head}<tbody>{rows}</tbody></table>'


def _classes(report: dict) -> str:
    """Per-class precision, recall, F1 and support on eval, and the confusion matrix."""
    rows = "".join(
        f"<tr><td>{_esc(name)}</td>{_cell(c['precision'])}{_cell(c['recall'])}"
        f"{_cell(c['f1'])}{_cell(c['support'])}</tr>"
        for name, c in report["per_class"].items()
    )
    head = (
        '<thead><tr><th>class</th><th class="n">precision</th><th class="n">recall</th>'
        '<th class="n">F1</th><th class="n">support</th></tr></thead>'
    )
    confusion = report["confusion_matrix"]
    names = confusion["classes"]
    matrix_head = (
        "<thead><tr><th>true \\ predicted</th>"
        + "".join(f'<th class="n">{_esc(n)}</th>' for n in names)
        + "</tr></thead>"
    )
    matrix_rows = "".join(
        f"<tr><td>{_esc(name)}</td>{''.join(_cell(v) for v in row)}</tr>"
        for name, row in zip(names, confusion["matrix"])
    )
    return (
        f"<h2>Evaluation by class</h2>\n<p>Macro F1 {_esc(_fmt(report['macro_f1']))}, "
        f"accuracy {_esc(_fmt(report['accuracy']))} over the eval split.</p>\n"
        f'<table class="classes">{head}<tbody>{rows}</tbody></table>\n'
        f'<table class="confusion">{matrix_head}<tbody>{matrix_rows}</tbody></table>'
    )


def _model_inputs(metrics: dict) -> str:
    """The model's inputs, and each feature that is not one with the reason."""
    used = ", ".join(metrics.get("model_inputs") or []) or "none"
    rows = [f'<tr><th>Model inputs</th><td data-key="model_inputs">{_esc(used)}</td></tr>']
    for name, why in (metrics.get("not_model_inputs") or {}).items():
        rows.append(f"<tr><th>Not an input: {_esc(name)}</th><td>{_esc(why)}</td></tr>")
    return f'<h2>Model inputs</h2>\n<table class="summary">{"".join(rows)}</table>'


def _dataset(summary: dict) -> str:
    per_split = summary.get("splits", {})
    splits = ", ".join(f"{name} {per_split[name]}" for name in in_split_order(per_split))
    rows = [
        ("Name", summary.get("name")),
        ("Label", summary.get("label")),
        ("Features", summary.get("features")),
        ("Compression", summary.get("compression")),
        ("Records per split", splits),
        ("Rejected records", summary.get("rejected_records")),
    ]
    body = "".join(f"<tr><th>{_esc(k)}</th>{_cell(v)}</tr>" for k, v in rows)
    return f'<h2>Dataset</h2>\n<table class="dataset">{body}</table>'


def _metric_names(history: list[dict]) -> list[str]:
    """The metrics of the history without their val_ prefix, loss first."""
    keys = {k for row in history for k in row} - {"epoch", RATE}
    return sorted({k.removeprefix("val_") for k in keys}, key=_metric_order)


def _metric_order(name: str) -> tuple[bool, str]:
    return (name != "loss", name)


def _charts(history: list[dict]) -> str:
    epochs = [row["epoch"] + 1 for row in history]
    figures = []
    for name in _metric_names(history):
        series = [
            (label, [row.get(key) for row in history], style)
            for label, key, style in (("train", name, _TRAIN), ("validation", f"val_{name}", _VAL))
            if any(_finite(row.get(key)) for row in history)
        ]
        figures.append(_line_chart(name, epochs, series))
    rate = [row.get(RATE) for row in history]
    figures.append(_line_chart("examples/s", epochs, [("train", rate, _RATE_STYLE)]))
    return '<h2>Per epoch</h2>\n<div class="charts">\n' + "\n".join(figures) + "\n</div>"


def _epoch_table(history: list[dict]) -> str:
    columns = [k for n in _metric_names(history) for k in (n, f"val_{n}")]
    columns = [c for c in columns if any(row.get(c) is not None for row in history)] + [RATE]
    head = "<th>epoch</th>" + "".join(f'<th class="n">{_esc(c)}</th>' for c in columns)
    rows = "".join(
        f'<tr data-epoch="{row["epoch"] + 1}"><td>{row["epoch"] + 1}</td>'
        + "".join(_cell(row.get(c), c) for c in columns)
        + "</tr>"
        for row in history
    )
    return (
        f'<h2>Epochs</h2>\n<table class="epochs"><thead><tr>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def _line_chart(
    name: str, epochs: Sequence[int], series: Sequence[tuple[str, Sequence[Number], tuple]]
) -> str:
    """An SVG line chart of `series` (label, values, (colour, dash)) over `epochs`."""
    values = [v for _, vs, _ in series for v in vs if _finite(v)]
    x_ticks = _ticks(min(epochs), max(epochs), integer=True)
    y_ticks = _ticks(min(values), max(values)) if values else [0.0, 1.0]
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    right, bottom = _W - _RIGHT, _H - _BOTTOM

    def px(x: float) -> float:
        return _LEFT + (x - x0) / ((x1 - x0) or 1) * (right - _LEFT)

    def py(y: float) -> float:
        return bottom - (y - y0) / ((y1 - y0) or 1) * (bottom - _TOP)

    parts = [
        f'<line x1="{_LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#333"/>',
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{bottom}" stroke="#333"/>',
    ]
    for t in x_ticks:
        x = px(t)
        parts.append(
            f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 5}" stroke="#333"/>'
            f'<text x="{x:.1f}" y="{bottom + 18}" text-anchor="middle">{_fmt(t)}</text>'
        )
    for t in y_ticks:
        y = py(t)
        parts.append(
            f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#e4e4e4"/>'
            f'<line x1="{_LEFT - 5}" y1="{y:.1f}" x2="{_LEFT}" y2="{y:.1f}" stroke="#333"/>'
            f'<text x="{_LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>'
        )
    parts.append(
        f'<text x="{(_LEFT + right) / 2}" y="{_H - 8}" text-anchor="middle">epoch</text>'
        f'<text transform="translate(14 {(_TOP + bottom) / 2}) rotate(-90)" '
        f'text-anchor="middle">{_esc(name)}</text>'
    )
    for i, (label, vs, (colour, dash)) in enumerate(series):
        points = [(px(e), py(v), e, v) for e, v in zip(epochs, vs) if _finite(v)]
        dashes = f' stroke-dasharray="{dash}"' if dash else ""
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in points)
        parts.append(
            f'<polyline class="series" data-series="{_esc(label)}" points="{path}" fill="none" '
            f'stroke="{colour}" stroke-width="2"{dashes}/>'
        )
        parts.extend(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}">'
            f"<title>{_esc(label)}, epoch {e}: {_fmt(v)}</title></circle>"
            for x, y, e, v in points
        )
        lx = right - 110 * (len(series) - i)  # the legend, top right, one entry per series
        parts.append(
            f'<line x1="{lx}" y1="14" x2="{lx + 24}" y2="14" stroke="{colour}" '
            f'stroke-width="2"{dashes}/><text x="{lx + 30}" y="18">{_esc(label)}</text>'
        )
    body = "\n".join(parts)
    return (
        f'<figure class="chart" data-metric="{_esc(name)}"><figcaption>{_esc(name)}</figcaption>'
        f'<svg width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" role="img" aria-label="{_esc(name)} per epoch">\n'
        f"{body}\n</svg></figure>"
    )


def _ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """Round tick values (steps of 1, 2 or 5 times a power of ten) that cover [lo, hi]."""
    if hi - lo <= 1e-12 * max(1.0, abs(hi)):
        pad = 1.0 if integer else (abs(lo) * 0.1 or 1.0)
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    if integer:
        step = max(1, round(step))
    start, stop = math.floor(lo / step), math.ceil(hi / step)
    return [round(i * step, 12) for i in range(start, stop + 1)]


def _cell(value, key: str | None = None) -> str:
    """A table cell showing `value`; numbers carry their exact value in data-value."""
    attrs = f' data-key="{_esc(key)}"' if key else ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        attrs = f' class="n"{attrs} data-value="{value!r}"'
    return f"<td{attrs}>{_esc(_fmt(value))}</td>"


def _fmt(value) -> str:
    """Numbers with 4 significant digits (whole numbers, and others from 10,000 on, whole with
    thousands separators as in the ETL's report); missing ones as '–'."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _float(text: str | None) -> float | None:
    # CSVLogger writes NA for a key an epoch does not have.
    if text is None or text.strip() in ("", "NA"):
        return None
    return float(text)


def _finite(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _esc(text) -> str:
    return for_html(str(text))
