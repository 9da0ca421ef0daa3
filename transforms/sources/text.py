"""Reads text files into chunks of raw records: one record per line.

Like tf.data's TextLineDataset, a line ends at `\\n`; a `\\r` just before it is part of the
terminator (CRLF files), a lone `\\r` elsewhere is kept as text. Line numbers count `\\n`s. A
line is either one string field (`field`, default `line`) or, with `regex`, one field per named
group of a Python regular expression that must match the whole line (a group that does not take
part in the match is a missing value); a line it does not match is rejected. Blank lines (empty
or only whitespace) are not records unless `skip_blank_lines` is false. A byte-order mark at
the start of a file is not text. Bytes the encoding cannot decode are kept (as lone surrogates):
a `string` feature rejects such a value, a `bytes` feature gets the bytes back, and a rejected
record's text shows them as `\\xNN`.

Regexes are matched in bounded time. A regex RE2 (google-re2) can run as Python's engine would
is matched with RE2, whatever it holds: RE2 takes time linear in a line's length, where Python's
backtracking engine can take time exponential in it (`(a+)+`, `(b|bb)+` against `bbb…c`:
minutes at 50 characters), so one hostile line would hold the job for hours. `for_re2` spells
`\\w`, `\\d`, `\\s` as the classes Python gives them (RE2's are ASCII, its `\\s` lacks `\\v`), so
both engines match the same text (but for characters newer than Python's Unicode database);
`\\b`, ASCII in RE2, is RE2's on ASCII lines only. A regex only Python's engine can run (a
backreference, a lookaround, a possessive repeat), and a line RE2 cannot take (undecoded
bytes; `\\b` beyond ASCII), is matched with the `regex` package, which matches as `re` does but
takes a time limit: MATCH_SECONDS per line, past which the line is rejected (`TOO_SLOW`) and
the next one is read; `re` itself cannot be stopped. `regex_note` warns of that at start-up. A
nested quantifier RE2 cannot run (`(a+)+` with a backreference) is refused at config time:
nearly every line that does not match would take the whole limit.

The work per line is done by C code over whole blocks: decoding, `str.split`, the blank test
(`str.strip` through `map`), `Pattern.fullmatch` through `map`, and a `zip` that turns the
matches' groups into columns. Values stay text; `transforms.schema` types them.

Longer than most modules because a regex is chosen, respelled and matched here whole: the engine
that takes it (RE2, or `regex` with a time limit), `for_re2`, the config-time refusal and the
matching of each line must agree on what a line matches and how long it may take.
"""

from __future__ import annotations

import codecs
import dataclasses
import itertools
import operator
import re
from typing import Any, BinaryIO, Iterable, Iterator

import re2

from transforms.contract.config import OptionError, SourceOptions, SourceSpec
from transforms.records import (
    CHUNK_ROWS,
    MAX_LINE_CHARS,
    RawChunk,
    Rejected,
    location,
    one_line_records,
    rejection,
)
from transforms.sources.chunks import ChunkBuilder
from transforms.sources.registry import FILE_COMPRESSIONS, Format, OptionsReader

NO_MATCH = "text: line does not match regex"
_BOTH = re2._re2.RE2.Anchor.ANCHOR_BOTH  # a match of the whole line
TOO_LONG = "text: line longer than 64 Mi characters, not read"
MATCH_SECONDS = 1.0  # Python's engine, per line (a regex RE2 cannot run)
TOO_SLOW = (
    f"text: regex took longer than {MATCH_SECONDS:g} s on this line (Python's backtracking "
    "engine: a regex RE2 cannot run), not read"
)
_READ_BYTES = 1 << 20
_BOM = "\ufeff"


@dataclasses.dataclass(frozen=True)
class TextOptions(SourceOptions):
    """The options of a text source: a line's encoding and the fields made of it (the whole
    line as `field`, or the named groups of `regex`), and whether blank lines are skipped."""

    encoding: str = "utf-8"  # a codec's canonical name
    field: str | None = "line"  # None with a regex
    regex: str | None = None
    skip_blank_lines: bool = True


def options(raw: dict[str, Any]) -> TextOptions:
    """The text options, checked, with their defaults."""
    opts = OptionsReader(raw)
    regex = opts.string("regex", None)
    if regex is not None and opts.has("field"):
        raise OptionError(
            "field", "cannot be used with regex (the regex's group names are the fields)"
        )
    field = opts.string("field", "line")
    if regex is not None:
        compile_regex(regex)
    out = TextOptions(
        encoding=opts.encoding(),
        field=None if regex is not None else field,
        regex=regex,
        skip_blank_lines=opts.boolean("skip_blank_lines", True),
    )
    opts.done()
    return out


def compile_regex(regex: str) -> Any:
    """The compiled pattern, `Linear` (RE2) where RE2 can match the regex as Python's engine
    would, else `Budgeted` (Python's engine, a time limit per line); an `OptionError` on `regex`
    when it is invalid, has no names, or has a nested quantifier RE2 cannot run."""
    try:
        pattern = re.compile(regex)
    except re.error as e:
        raise OptionError("regex", f"invalid regular expression: {e}") from None
    if not pattern.groupindex:
        raise OptionError("regex", "has no named group: name each field as (?P<name>...)")
    ascii_, why = _re2(regex, unicode=False)
    if ascii_ is not None:
        return Linear(regex, ascii_, _re2(regex, unicode=True)[0])
    nested = nested_quantifier(regex)
    if nested is not None:
        raise OptionError(
            "regex",
            f"has a nested quantifier ({nested}), which can take time exponential in a line's "
            f"length, and the linear-time engine (RE2) cannot run it ({why}); make the inner "
            "repeat possessive (a++) or atomic ((?>...)), or rewrite it without one",
        )
    return Budgeted(regex)


def _re2(regex: str, unicode: bool) -> tuple[Any, str]:
    """(RE2's program of the regex for ASCII lines or for any text, "") or (None, why RE2
    cannot run it as Python would)."""
    spelled = for_re2(regex, unicode)
    if spelled is None:
        return None, "its \\b, \\B or a negated class in a set means other text in RE2"
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(spelled, options)._regexp, ""
    except re2.error as e:
        why = e.args[0].decode("utf-8", "replace") if isinstance(e.args[0], bytes) else e
        return None, str(why)


# What Python's engine means by \w, \d and \s in text (str.isalnum() or _, str.isdecimal(),
# str.isspace()) as RE2 classes, for any text and for ASCII text: RE2's own are ASCII, and its
# \s lacks \v and \x1c-\x1f.
_CLASSES = {
    True: {"w": r"\p{L}\p{N}_", "d": r"\p{Nd}", "s": r"\t\n\v\f\r\x1c-\x1f\x85\p{Z}"},
    False: {"w": r"\w", "d": r"\d", "s": r"\t\n\v\f\r\x1c-\x1f "},
}
_UP_TO = re.compile(r"\{,([0-9]+)\}")  # Python's {,n} is {0,n}; RE2 reads it as text


def for_re2(regex: str, unicode: bool = True) -> str | None:
    """The regex spelled so that RE2 matches what Python's engine matches, on any text or
    (`unicode` false) on ASCII text: `\\w`, `\\d`, `\\s` and their negations as Python's
    classes, `{,n}` as `{0,n}`. None where RE2 cannot say the same: a `[:` in a set (a POSIX
    class in RE2, text in Python), and for any text `\\b`, `\\B` (RE2's are ASCII) and a
    negated class in a set."""
    classes = _CLASSES[unicode]
    out: list[str] = []
    i, n, in_set = 0, len(regex), False
    while i < n:
        c = regex[i]
        if c == "\\" and i + 1 < n:
            e = regex[i + 1]
            if e in "wds":
                out.append(classes[e] if in_set else f"[{classes[e]}]")
            elif e in "WDS":
                if not in_set:
                    out.append(f"[^{classes[e.lower()]}]")
                elif unicode or e == "S":
                    return None
                else:
                    out.append(regex[i : i + 2])  # ASCII \W and \D: RE2's are Python's
            elif e in "bB" and (unicode or in_set):  # in a set, Python's \b is a backspace
                return None
            else:
                out.append(regex[i : i + 2])
            i += 2
        elif in_set:
            if c == "[" and regex.startswith("[:", i):
                return None
            in_set = c != "]"
            out.append(c)
            i += 1
        elif c == "[":
            start = i + 1 + regex.startswith("^", i + 1)
            start += regex.startswith("]", start)  # a ] first in a set is text
            out.append(regex[i:start])
            i, in_set = start, True
        elif c == "{" and (up_to := _UP_TO.match(regex, i)):
            out.append(f"{{0,{up_to.group(1)}}}")
            i = up_to.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Budgeted:
    """A regex of Python's engine that gives up on a line after MATCH_SECONDS: the `regex`
    package, as `re` (VERSION0) but with a time limit, for a regex RE2 cannot run."""

    def __init__(self, regex: str):
        import regex as engine  # the one engine with a time limit; only for such regexes

        self._pattern = engine.compile(regex, engine.VERSION0)
        self.groupindex = dict(self._pattern.groupindex)

    def groups(self, line: str) -> Any:
        """The groups of the whole line's match, None, or TOO_SLOW past MATCH_SECONDS."""
        try:
            match = self._pattern.fullmatch(line, timeout=MATCH_SECONDS)
        except TimeoutError:
            return TOO_SLOW
        return None if match is None else match.groups()


class Linear:
    """A regex matched by RE2 in time linear in the line: an ASCII line by the program of
    Python's classes on ASCII (RE2's \\w, \\d, \\b as they are: several times faster than the
    Unicode classes), another line by the program of the Unicode classes; a line neither can
    take (lone surrogates from undecoded bytes; `\\b` beyond ASCII) by Python's engine within
    MATCH_SECONDS.

    Through RE2's C++ binding (`_re2`, of the pinned google-re2): its Python `fullmatch` spends
    some 40 µs a line in Python code mapping byte offsets to characters, ten times `re`.
    """

    def __init__(self, regex: str, ascii_: Any, unicode: Any):  # `_re2.RE2` programs
        self._regex = regex
        self._ascii = ascii_
        self._unicode = unicode  # None: not RE2's to match beyond ASCII
        self.groupindex = dict(re.compile(regex).groupindex)
        self._fallback: Budgeted | None = None  # made at the first line RE2 cannot take

    def groups(self, line: str) -> Any:
        """The groups of the whole line's match, None, or TOO_SLOW (Python's engine only)."""
        if line.isascii():
            data = line.encode("ascii")
            spans = self._ascii.Match(_BOTH, data, 0, len(data))
            if spans[0][0] < 0:
                return None
            return tuple(None if a < 0 else line[a:b] for a, b in spans[1:])
        try:
            text = line.encode("utf-8")
        except UnicodeEncodeError:
            text = b""
        if not text or self._unicode is None:
            if self._fallback is None:
                self._fallback = Budgeted(self._regex)
            return self._fallback.groups(line)
        spans = self._unicode.Match(_BOTH, text, 0, len(text))
        if spans[0][0] < 0:
            return None
        return tuple(None if a < 0 else text[a:b].decode("utf-8") for a, b in spans[1:])


def regex_note(regex: str | None) -> str | None:
    """A start-up warning for a regex matched by Python's engine (a time limit per line), or by
    RE2 because it has a nested quantifier (which Python's engine would take exponential time
    on); None for the others."""
    if regex is None:
        return None
    if _re2(regex, unicode=False)[0] is None:
        return (
            "regex is matched by Python's backtracking engine (RE2 cannot run it): a line that "
            f"takes longer than {MATCH_SECONDS:g} s is rejected"
        )
    nested = nested_quantifier(regex)
    if nested is not None:
        return f"regex has a nested quantifier ({nested}): matched by RE2 in linear time"
    return None


def nested_quantifier(regex: str) -> str | None:
    """The first repeated group of a (valid) regex that holds an unbounded repeat, shown as
    text, or None; possessive repeats and atomic groups do not backtrack and do not count."""
    # the regex parser's own modules: private, so typeshed leaves them out
    from re import _constants as c  # type: ignore[attr-defined]
    from re import _parser  # type: ignore[attr-defined]

    def unbounded(items) -> bool:
        for op, arg in items:
            if op in (c.MAX_REPEAT, c.MIN_REPEAT):
                if arg[1] == c.MAXREPEAT or unbounded(arg[2]):
                    return True
            elif op == c.SUBPATTERN and unbounded(arg[3]):
                return True
            elif op == c.BRANCH and any(unbounded(b) for b in arg[1]):
                return True
        return False

    def find(items) -> bool:
        for op, arg in items:
            if op in (c.MAX_REPEAT, c.MIN_REPEAT):
                if arg[1] > 1 and unbounded(arg[2]):
                    return True
                if find(arg[2]):
                    return True
            elif op == c.SUBPATTERN and find(arg[3]):
                return True
            elif op == c.BRANCH and any(find(b) for b in arg[1]):
                return True
            elif op in (c.ASSERT, c.ASSERT_NOT) and find(arg[1]):
                return True
        return False

    found = find(_parser.parse(regex))
    if not found:
        return None
    match = _NESTED_TEXT.search(regex)
    return match.group(0) if match else "a repeated group holding a repeat"


# The shortest text of a repeated group with a quantifier inside, to name it in messages.
_NESTED_TEXT = re.compile(r"\((?:[^()]|\([^()]*\))*[*+}](?:[^()]|\([^()]*\))*\)[*+{]")


def parse_text(
    stream: BinaryIO, path: str, source: SourceSpec, chunk_rows: int = CHUNK_ROWS
) -> Iterator[RawChunk | Rejected]:
    """Yields chunks of raw records and, for lines the regex does not match, rejected records."""
    opts = source.options_as(TextOptions)
    pattern = compile_regex(opts.regex) if opts.regex is not None else None
    match = None if pattern is None else pattern.groups  # a line's groups, None or TOO_SLOW
    pending = ChunkBuilder(source.name, path, chunk_rows, raw_fields=_raw_text, text=True)
    for first, lines in _line_blocks(_decoded(stream, opts.encoding)):
        if len(lines) == 1 and isinstance(lines[0], Overlong):
            where = location(path, first)
            yield rejection(source.name, where, TOO_LONG, f"<{lines[0].chars} characters>")
            continue
        numbers: Any = range(first, first + len(lines))
        if opts.skip_blank_lines:
            keep = list(map(bool, map(str.strip, lines)))
            if not all(keep):
                lines = list(itertools.compress(lines, keep))
                numbers = list(itertools.compress(numbers, keep))
        if pattern is None:
            assert opts.field is not None  # a field without a regex
            yield from pending.add({opts.field: lines}, numbers, lines)
            continue
        assert match is not None  # made with the pattern
        matches = list(map(match, lines))
        if None in matches or TOO_SLOW in matches:
            found = [m is not None and m is not TOO_SLOW for m in matches]
            for m, line, number in itertools.compress(
                zip(matches, lines, numbers), map(operator.not_, found)
            ):
                why = TOO_SLOW if m is TOO_SLOW else NO_MATCH
                yield rejection(source.name, location(path, number), why, shown(line))
            matches = list(itertools.compress(matches, found))
            lines = list(itertools.compress(lines, found))
            numbers = list(itertools.compress(numbers, found))
        if not matches:
            continue
        groups = list(zip(*matches))
        columns = {name: groups[index - 1] for name, index in pattern.groupindex.items()}
        yield from pending.add(columns, numbers, lines)
    yield from pending.flush()


parse = parse_text
FORMAT = Format(
    name="text",
    kind="file",
    options_type=TextOptions,
    options=options,
    reader=parse_text,
    extensions=(".txt",),
    compressed=FILE_COMPRESSIONS,
)


def shown(line: str) -> str:
    """A line as text for the rejected output: undecodable input bytes as `\\xNN` escapes.

    Values keep undecodable bytes as lone surrogates (a `bytes` feature gets the bytes back, a
    `string` feature rejects the value), but text holding surrogates cannot be encoded as UTF-8.
    """
    return line.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _raw_text(lines: list[str]) -> dict[str, Any]:
    """The raw-text fields of a chunk of these lines, undecodable bytes shown as `\\xNN`."""
    raws = one_line_records(lines)
    if not raws["raw_text"].isascii():
        try:
            raws["raw_text"].encode("utf-8")
        except UnicodeEncodeError:
            raws = one_line_records([shown(line) for line in lines])
    return raws


def _decoded(stream: BinaryIO, encoding: str) -> Iterator[str]:
    """The text of a byte stream, a block at a time; undecodable bytes as lone surrogates."""
    decoder = codecs.getincrementaldecoder(encoding)(errors="surrogateescape")
    while True:
        data = stream.read(_READ_BYTES)
        block = decoder.decode(data, final=not data)
        if block:
            yield block
        if not data:
            return


class Overlong(str):
    """A line longer than MAX_LINE_CHARS, not kept: only its length (`chars`)."""

    chars: int = 0


def _overlong(chars: int) -> list[str]:
    line = Overlong("")
    line.chars = chars
    return [line]


def _line_blocks(blocks: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """(line number of the first line, lines without terminators) for blocks of text; a line
    longer than MAX_LINE_CHARS comes alone, as an `Overlong` (its text is not held)."""
    first = 1
    head: list[str] = []  # the start of a line that runs past the blocks read so far
    held = 0  # the characters in `head`
    skipped = 0  # the characters of an overlong line read so far (not held)
    start = True
    for block in blocks:
        if start:
            start = False
            block = block[1:] if block.startswith(_BOM) else block
        cut = block.rfind("\n")
        if cut < 0:
            if skipped:
                skipped += len(block)
                continue
            head.append(block)
            held += len(block)
            if held > MAX_LINE_CHARS:
                skipped, head, held = held, [], 0
            continue
        if skipped:  # the overlong line ends in this block
            end = block.index("\n")
            yield first, _overlong(skipped + end)
            first += 1
            skipped, block = 0, block[end + 1 :]
            cut = block.rfind("\n")
            if cut < 0:
                head, held = ([block], len(block)) if block else ([], 0)
                continue
        body = "".join(head) + block[: cut + 1] if head else block[: cut + 1]
        head = [block[cut + 1 :]] if cut + 1 < len(block) else []
        held = len(head[0]) if head else 0
        if "\r" in body:
            body = body.replace("\r\n", "\n")
        lines = body.split("\n")
        lines.pop()  # the empty string after the last terminator
        yield first, lines
        first += len(lines)
    if skipped:
        yield first, _overlong(skipped)
        return
    last = "".join(head)
    if last:  # a last line without a terminator
        yield first, [last[:-1] if last.endswith("\r") else last]
