"""Where a CSV or JSON Lines file can be cut into ranges, found one piece at a time, in parallel.

A file is cut into pieces from its size alone. Each piece is scanned on its own, by any worker,
into a `Summary` of a few numbers: the parity of its quotes, its newlines and, for each of the
two states it may start in (outside or inside a quoted field), the end of its first record and
whether its quotes are well placed. Summaries compose (`Summary.then`): the state a piece starts
in is the parity of the quotes before it, so a pass over a few numbers per piece, not over the
bytes, picks each piece's real summary and the line numbers at its cut. This is the speculative
approach of parallel CSV parsing (Ge et al., "Speculative Distributed CSV Data Parsing for Big
Data Analytics", SIGMOD 2019; Stehle and Jacobsen, ParPaRaw, VLDB 2020), with two states.

The rules are those of `transforms.sources.csv`'s scan: a newline ends a record when an even
number of quotes precede it; quotes are sound when every opening quote (even count before it)
follows a delimiter, a newline, a quote or the file's start, and every closing quote is followed
by a delimiter, CR, LF, a quote or the file's end; a file holding a lone CR or a NUL byte, or a
misplaced quote, is not cut (read whole, as the csv module would). JSON Lines has no quote
state: a record ends at each LF, and a file holding a lone CR is not cut.
"""

from __future__ import annotations

import dataclasses
from typing import BinaryIO

import numpy as np

_QUOTE, _LF, _CR = ord('"'), ord("\n"), ord("\r")
SCAN_BYTES = 16 << 20  # bytes scanned at a time (a piece's summary composes those of its blocks)

End = tuple[int, int]  # (offset just past a record's newline, newlines up to it), in the piece


@dataclasses.dataclass(frozen=True)
class Summary:
    """What a piece of a file tells about its records, for either state it may start in.

    `first[s]` is the first record end in the piece when it starts in state `s` (0: outside
    quotes, 1: inside), `sound[s]` whether its quotes are well placed then; `clean`: no lone
    CR and no NUL byte. `odd`: the parity of its quotes, so the state the next piece starts in is
    `s ^ odd`.
    """

    size: int
    newlines: int
    odd: bool
    first: tuple[End | None, End | None]
    sound: tuple[bool, bool]
    clean: bool

    def then(self, after: Summary) -> Summary:
        """The summary of this piece followed by `after`."""

        def first(s: int) -> End | None:
            if self.first[s] is not None:
                return self.first[s]
            end = after.first[s ^ self.odd]
            return None if end is None else (self.size + end[0], self.newlines + end[1])

        return Summary(
            self.size + after.size,
            self.newlines + after.newlines,
            self.odd ^ after.odd,
            (first(0), first(1)),
            (self.sound[0] and after.sound[self.odd], self.sound[1] and after.sound[not self.odd]),
            self.clean and after.clean,
        )


def scan(data: bytes, before: int | None, after: int | None, delimiter: int | None) -> Summary:
    """The summary of `data`, a piece of a file: `before` and `after` are the bytes around it
    (None at the file's start and end). `delimiter` None: JSON Lines."""
    a = np.frombuffer(data, np.uint8)
    lf = np.flatnonzero(a == _LF)
    # the byte after each one (after the last: a newline at the file's end, as far as a closing
    # quote is concerned; a CR there is lone all the same)
    nxt = np.append(a[1:], np.uint8(_LF if after is None else after))
    lone_cr = ((a == _CR) & (nxt != _LF)).any() or (after is None and a[-1] == _CR)
    clean = not lone_cr
    if delimiter is None:
        first = (int(lf[0]) + 1, 1) if len(lf) else None
        return Summary(len(a), len(lf), False, (first, first), (True, True), clean)
    clean = clean and not (a == 0).any()
    quotes = np.flatnonzero(a == _QUOTE)
    prev = np.append(np.uint8(_LF if before is None else before), a[:-1])  # the byte before each
    quotes_before = np.searchsorted(quotes, lf)  # the piece's quotes before each newline
    firsts: list[End | None] = []
    sound: list[bool] = []
    for state in (0, 1):
        ends = np.flatnonzero(((quotes_before + state) & 1) == 0)
        firsts.append((int(lf[ends[0]]) + 1, int(ends[0]) + 1) if len(ends) else None)
        opening, closing = quotes[state::2], quotes[1 - state :: 2]
        sound.append(
            bool(np.isin(prev[opening], (delimiter, _LF, _QUOTE)).all())
            and bool(np.isin(nxt[closing], (delimiter, _CR, _LF, _QUOTE)).all())
        )
    odd = bool(len(quotes) & 1)
    return Summary(len(a), len(lf), odd, (firsts[0], firsts[1]), (sound[0], sound[1]), clean)


def scan_range(f: BinaryIO, path: str, start: int, end: int, delimiter: int | None) -> Summary:
    """The summary of bytes [start, end) of an open file, read `SCAN_BYTES` at a time."""
    f.seek(max(start - 1, 0))
    before = f.read(1)[0] if start > 0 else None
    pos, total = start, None
    data = f.read(min(SCAN_BYTES, end - pos) + 1)
    while True:
        n = min(SCAN_BYTES, end - pos)
        block = data[:n]
        if len(block) < n:
            raise OSError(f"{path}: ended at byte {pos + len(block)}, before byte {end}")
        summary = scan(block, before, data[n] if len(data) > n else None, delimiter)
        total = summary if total is None else total.then(summary)
        pos += n
        if pos >= end:
            return total
        before = block[-1]
        data = data[n:] + f.read(min(SCAN_BYTES, end - pos))
