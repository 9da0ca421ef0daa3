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

A regex with a nested quantifier (a repeated group that itself holds an unbounded repeat, as in
`(a+)+` or `(\\w+\\s?)*`) can take time exponential in a line's length with Python's engine
(backtracking): one hostile line would hold the job for hours. Such a regex is matched with RE2
(google-re2), which takes linear time; there `\\w`, `\\d`, `\\s` and `\\b` are ASCII-only, and
a line holding bytes the encoding could not decode is rejected (`NOT_TEXT`). A nested quantifier
RE2 cannot run (with a backreference or a lookaround) is refused at config time. `regex_note`
says which regexes RE2 matches, for the warning at start-up. Other regexes keep Python's engine.

The work per line is done by C code over whole blocks: decoding, `str.split`, the blank test
(`str.strip` through `map`), `Pattern.fullmatch` through `map`, and a `zip` that turns the
matches' groups into columns. Values stay text; `transforms.schema` types them.
"""

from __future__ import annotations

import codecs
import dataclasses
import itertools
import operator
import re
from typing import Any, BinaryIO, Iterable, Iterator

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
TOO_LONG = "text: line longer than 64 Mi characters, not read"
NOT_TEXT = "text: line holds bytes the encoding cannot decode (the regex is matched by RE2)"
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
    """The compiled pattern (Python's, or RE2's for a nested quantifier); an `OptionError` on
    `regex` when it is invalid, has no names, or has a nested quantifier RE2 cannot run."""
    try:
        pattern = re.compile(regex)
    except re.error as e:
        raise OptionError("regex", f"invalid regular expression: {e}") from None
    if not pattern.groupindex:
        raise OptionError("regex", "has no named group: name each field as (?P<name>...)")
    nested = nested_quantifier(regex)
    if nested is None:
        return pattern
    import re2  # only for the regexes that need it

    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(regex, options)
    except re2.error as e:
        why = e.args[0].decode("utf-8", "replace") if isinstance(e.args[0], bytes) else e
        raise OptionError(
            "regex",
            f"has a nested quantifier ({nested}), which can take time exponential in a line's "
            f"length, and the linear-time engine (RE2) cannot run it ({why}); make the inner "
            "repeat possessive (a++) or atomic ((?>...)), or rewrite it without one",
        ) from None


def regex_note(regex: str | None) -> str | None:
    """A start-up warning for a regex RE2 matches (a nested quantifier); None for the others."""
    nested = None if regex is None else nested_quantifier(regex)
    if nested is None:
        return None
    return (
        f"regex has a nested quantifier ({nested}): matched by RE2 in linear time, where \\w, "
        "\\d, \\s and \\b match ASCII only"
    )


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
    match = None if pattern is None else _matcher(pattern)
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
        if None in matches or NOT_TEXT in matches:
            found = [m is not None and m is not NOT_TEXT for m in matches]
            for m, line, number in itertools.compress(
                zip(matches, lines, numbers), map(operator.not_, found)
            ):
                why = NOT_TEXT if m is NOT_TEXT else NO_MATCH
                yield rejection(source.name, location(path, number), why, shown(line))
            matches = list(itertools.compress(matches, found))
            lines = list(itertools.compress(lines, found))
            numbers = list(itertools.compress(numbers, found))
        if not matches:
            continue
        groups = list(zip(*map(_GROUPS, matches)))
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
_GROUPS = operator.methodcaller("groups")


def _matcher(pattern: Any) -> Any:
    """`pattern.fullmatch` for Python's engine; for RE2's, the same with NOT_TEXT for a line
    holding lone surrogates (undecoded bytes), which RE2 cannot take."""
    if isinstance(pattern, re.Pattern):
        return pattern.fullmatch

    def fullmatch(line: str) -> Any:
        try:
            return pattern.fullmatch(line)
        except UnicodeEncodeError:
            return NOT_TEXT

    return fullmatch


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
