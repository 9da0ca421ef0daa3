"""The look of the run reports: the ETL's page (`pipelines.report`) and the trainer's
(`trainer.run.report`) are framed and styled by this one stylesheet, so the two read as one tool's.

A page is self-contained (inline CSS, no scripts, fonts or images). Numbers sit in cells of
class `n` (right-aligned, tabular figures); charts are inline SVG, their bars of class `bar`.
Splits are listed in one order (`in_split_order`: train first) and drawn in one colour each
(`COLOURS`, by that order: class `s0` train's blue, `s1` eval's red, ...), on both pages. What a
reader should not miss sits in a `banner` (a warning's orange), a table row of it in
`tr.flagged`.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape

# One colour per split or series, in split order: train blue, eval red, test green, then others.
COLOURS = ("#4a7bd0", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#17becf")
# The trainer's chart series: train solid in train's colour, validation dashed in eval's, a
# third (examples/s) in the third colour.
SERIES = ((COLOURS[0], ""), (COLOURS[1], "6 4"), (COLOURS[2], ""))
WARNING = "#e69500"
WARNING_BACKGROUND = "#fff4e5"

SPLIT_ORDER = ("train", "eval", "validation", "test")


def split_class(index: int) -> str:
    """The CSS class of the `index`-th split in `in_split_order` (its colour)."""
    return f"s{index % len(COLOURS)}"


def _split_colours() -> str:
    # bars without a split class wear the first split's colour
    return f".bar{{fill:{COLOURS[0]}}}" + "".join(
        f".{split_class(i)} .bar{{fill:{c}}}.swatch.{split_class(i)}{{background:{c}}}"
        for i, c in enumerate(COLOURS)
    )


CSS = (
    """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;
max-width:1100px;padding:0 1em;color:#222}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ccc;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}
th,td{padding:.2em .7em;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
thead th{border-bottom:1px solid #ccc}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
table.summary td.n,table.dataset td.n{text-align:left}
.muted{color:#777}pre{background:#f6f6f6;padding:.4em;white-space:pre-wrap;margin:.2em 0}
svg text{font:11px sans-serif;fill:#333}.node rect{fill:#eef3fb;stroke:#4a7bd0}
.edge{fill:none;stroke:#777;stroke-width:1.2}dl.summary{display:grid;
grid-template-columns:max-content auto;gap:.1em 1.5em}dl.summary dt{font-weight:bold}
dl.summary dd{margin:0}
.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
.split-charts{display:flex;flex-wrap:nowrap;gap:8px;align-items:flex-start}
figure{margin:0;border:1px solid #eee;padding:4px}figcaption{font-weight:bold;padding:2px 6px}
.feature{border:1px solid #e4e4e4;padding:.2em .8em .4em;margin:.6em 0}
.feature .banner{margin:.3em 0}.feature table{margin:0}.feature th,.feature td{padding:.1em .5em}
.feature figure{border:0;padding:0}.feature figcaption{padding:0 0 2px;font-weight:normal}
.swatch{display:inline-block;width:.75em;height:.75em;margin-right:.35em}
.mean{stroke:#222;stroke-dasharray:2 2}
"""
    + f".banner{{background:{WARNING_BACKGROUND};border-left:4px solid {WARNING};"
    "padding:.4em 1em;margin:1em 0}.banner ul{margin:.3em 0;padding-left:1.2em}\n"
    f"tr.flagged td{{background:{WARNING_BACKGROUND}}}"
    f"tr.flagged td:first-child{{box-shadow:inset 4px 0 {WARNING}}}\n" + _split_colours() + "\n"
)


def in_split_order(names: Iterable[str]) -> list[str]:
    """Split names as a reader expects them: train, eval (validation), test, then the others in
    their order."""
    names = list(names)
    known = [n for n in SPLIT_ORDER if n in names]
    return known + [n for n in names if n not in SPLIT_ORDER]


def page(title: str, kind: str, body: str) -> str:
    """A whole report page: `title` as the heading, `kind` ("run report", "training report")
    under it and in the window title, then `body` (HTML)."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(f'shardflow {kind}: {title}')}</title>"
        f"<style>{CSS}</style></head>\n<body>\n"
        f"<h1>{escape(title)}</h1>\n"
        f'<p class="muted">shardflow {escape(kind)}</p>\n'
        f"{body}\n</body></html>\n"
    )
