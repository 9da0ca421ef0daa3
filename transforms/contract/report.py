"""The look of the run reports: the ETL's page (`pipelines.report`) and the trainer's
(`trainer.report`) are framed and styled by this one stylesheet, so the two read as one tool's.

A page is self-contained (inline CSS, no scripts, fonts or images). Numbers sit in cells of
class `n` (right-aligned, tabular figures); charts are inline SVG, their bars of class `bar`.
"""

from __future__ import annotations

from html import escape

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;
max-width:1100px;padding:0 1em;color:#222}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ccc;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}
th,td{padding:.2em .7em;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
thead th{border-bottom:1px solid #ccc}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
table.summary td.n,table.dataset td.n{text-align:left}
.muted{color:#777}pre{background:#f6f6f6;padding:.4em;white-space:pre-wrap;margin:.2em 0}
svg text{font:11px sans-serif;fill:#333}.bar{fill:#4a7bd0}.node rect{fill:#eef3fb;stroke:#4a7bd0}
.edge{fill:none;stroke:#777;stroke-width:1.2}dl.summary{display:grid;
grid-template-columns:max-content auto;gap:.1em 1.5em}dl.summary dd{margin:0}
.charts{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0;border:1px solid #eee;padding:4px}
figcaption{font-weight:bold;padding:2px 6px}
.banner{background:#fff4e5;border-left:4px solid #e69500;padding:.4em 1em;margin:1em 0}
.banner ul{margin:.3em 0;padding-left:1.2em}
"""

# Chart series: the first (train) in the bars' blue, the second (eval) dashed red, a third green.
SERIES = (("#4a7bd0", ""), ("#d62728", "6 4"), ("#2ca02c", ""))


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
