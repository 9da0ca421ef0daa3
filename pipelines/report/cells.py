"""The pieces of the run report's HTML (`pipelines.report.page`): element ids, sections, tables
and cells holding a number (its raw value in `data-value`), and how numbers are written."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from pipelines.report.svg import attrs, escape, fmt_float, fmt_int

MAX_ID_PART_CHARS = 200  # of one name in an element id, escaped; longer ones end in a digest


def utf8_bytes(text: str) -> bytes:
    # surrogatepass: a lone surrogate (undecodable input) still has bytes to count and escape
    return text.encode("utf-8", "surrogatepass")


def make_id(*parts: str) -> str:
    """A stable element id: the parts, escaped by `id_part`, joined by '-'.

    Distinct parts give distinct ids: a part never holds '-' (it is escaped), and the escape
    is reversible, so `a b`, `a-b` and `a_b`, or `größe` and `größe_`, never share an id (the
    old rule, every character outside [A-Za-z0-9_.] as '_', gave them one).
    """
    return "-".join(id_part(str(p)) for p in parts)


def id_part(name: str) -> str:
    """Letters, digits (of any script), '_' and '.' as they are; any other character as ':'
    and the two hex digits of each of its UTF-8 bytes. An escaped name longer than
    MAX_ID_PART_CHARS becomes its start, '~' (never in an escaped name) and a digest."""
    if name.isascii() and name.replace("_", "a").replace(".", "a").isalnum():
        out = name  # the common case, e.g. bill_length_mm
    else:
        out = "".join(
            c if c.isalnum() or c in "_." else "".join(f":{b:02x}" for b in utf8_bytes(c))
            for c in name
        )
    if len(out) > MAX_ID_PART_CHARS:
        digest = hashlib.sha256(utf8_bytes(name)).hexdigest()[:16]
        out = f"{out[: MAX_ID_PART_CHARS // 2]}~{digest}"
    return out


def html_section(section_id: str, title: str, body: str) -> str:
    return f'<section id="{section_id}"><h2>{escape(title)}</h2>\n{body}\n</section>'


def html_table(header: list[str], rows: Iterable[list[str]], numeric: tuple[int, ...] = ()) -> str:
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


def num_cell(element_id: str, value: Any) -> str:
    return f'<td class="n"{attrs(id=element_id, data_value=value)}>{escape(fmt_int(value))}</td>'


def bytes_cell(element_id: str, value: Any) -> str:
    return f'<td class="n"{attrs(id=element_id, data_value=value)}>{escape(fmt_bytes(value))}</td>'


def stat_cell(split: str, feature: str, stat: str, value: Any, text: str | None = None) -> str:
    shown = text if text is not None else fmt_number(value)
    element_id = make_id("stat", split, feature, stat)
    return f'<td class="n"{attrs(id=element_id, data_value=value)}>{escape(shown)}</td>'


def stat_span(split: str, feature: str, stat: str, value: Any, text: str | None = None) -> str:
    shown = text if text is not None else fmt_number(value)
    element_id = make_id("stat", split, feature, stat)
    return f"<span{attrs(id=element_id, data_value=value)}>{escape(shown)}</span>"


def fmt_number(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "–" if value is None else str(value)
    return fmt_float(value)  # no thousands separator: a year reads 2007, not 2,007


def fmt_percent(rate: float | None) -> str:
    return "–" if rate is None else f"{100 * rate:.2f} %"


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 120:
        return f"{int(value // 60)} min {value % 60:.0f} s"
    return f"{value:.1f} s"


def fmt_bytes(value: float | None) -> str:
    if value is None:
        return "–"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(value) < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
