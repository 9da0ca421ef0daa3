"""Text made safe to show: secrets masked, and control characters escaped for a terminal.

Two rules every command applies to what it prints, whatever the text came from:
- `masked(text)`: the password of every URI's user info (`s3://key:***@bucket`) and the value
  of every secret-looking query parameter (`?token=***`, `&sig=***`) hidden, wherever they
  appear in the text (a message, a traceback, a log line). `ShardflowError` masks its message
  when it is made, so an error of ours never carries a secret, not even in a traceback;
  `mask_logs()` does the same for every log record.
- `printable(text)`: the characters that would act on a terminal rather than show on it
  (C0 and C1 controls, DEL, bidirectional overrides and isolates, line separators, lone
  surrogates) replaced by a visible escape (`\\x1b`, `\\u202e`): text from data (a CSV header,
  a feature value) can then neither recolour a terminal, ring it, overwrite a line nor reverse
  what follows it.
`shown(text)` is both, for a line printed to a terminal.
"""

from __future__ import annotations

import html
import logging
import re

MASK = "***"

# scheme://user:password@host: the password runs to the last `@` before a blank (passwords
# hold `/`, as AWS keys do, and sometimes an unencoded `@`); a longer match hides more, never
# less. Each part has a bound (a real user info is far under 1 KiB), so that masking a megabyte
# of hostile text takes linear time.
_USER_INFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s/?#@:]{0,256}:)\S{0,1024}@")

# ?name=value / &name=value where the name says it holds a secret; and `password=value`
# (a libpq connection string) anywhere.
_SECRET_NAME = r"[\w.-]{0,64}?(?:pass|pwd|secret|token|sig|key|credential|auth|session)[\w.-]{0,64}"
_QUERY = re.compile(
    rf"(?P<head>[?&;]{_SECRET_NAME}=|(?<![A-Za-z0-9])(?:password|passwd|pwd)=)"
    r"[^&#\s'\"]+?(?=[:,;.)]?(?:[&#\s'\"]|$))",  # a sentence's `:` or `,` after it stays
    re.IGNORECASE,
)

# The characters a terminal acts on: C0 and C1 controls and DEL (categories of `unicodedata`
# name them Cc), the bidirectional marks, embeddings, overrides and isolates, the line and
# paragraph separators, a byte-order mark, and lone surrogates (undecodable bytes read with
# surrogateescape, which no terminal encoding can write).
_ACTIVE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff"
    "\ud800-\udfff]"
)
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def masked(text: str) -> str:
    """`text` with every URI's password and every secret-looking query parameter's value
    replaced by `***`; the rest as it was. Masking masked text changes nothing."""
    text = _USER_INFO.sub(lambda m: f"{m['head']}{MASK}@", text)
    return _QUERY.sub(lambda m: f"{m['head']}{MASK}", text)


def printable(text: str, json: bool = False) -> str:
    """`text` with each character a terminal would act on (an escape sequence's ESC, a bell, a
    carriage return, a C1 control, a bidi override) replaced by a visible escape: `\\x1b`,
    `\\r`, `\\u202e`. `json=True` is for the text json.dumps made (which leaves DEL, C1
    controls and bidi marks as they are): they become JSON escapes (`\\u202e`), and newlines
    and tabs, which json.dumps writes only between values, stay."""
    if json:
        return _ACTIVE.sub(lambda m: m[0] if m[0] in _NAMED else f"\\u{ord(m[0]):04x}", text)
    return _ACTIVE.sub(lambda m: _NAMED.get(m[0]) or _escape(m[0]), text)


def for_html(text: str) -> str:
    """`text` for an HTML page: markup escaped (`html.escape`), and the characters a page would
    act on rather than show (bidi overrides that reverse what follows them in their cell,
    controls) as visible escapes, as `printable` shows them; tabs and line breaks stay."""
    return html.escape(
        _ACTIVE.sub(lambda m: m[0] if m[0] in _NAMED else _escape(m[0]), text), quote=True
    )


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: str, json: bool = False) -> str:
    """A line as a command may print it: secrets masked, active characters escaped."""
    return printable(masked(text), json=json)


def mask_logs() -> None:
    """Masks secrets (`masked`) in every log record made from now on, by any logger, its
    traceback included. Installed once however often it is called: by `shardflow` and by each
    command's main.

    A record factory rather than a `logging.Filter`: a filter on a logger misses the records of
    its child loggers, and one on a handler misses the handlers added later (a command's
    `logging.basicConfig`, a library's own)."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "masks_secrets", False):
        return

    def masking(*args, **kwargs) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format: the handler reports it when it formats
            return record
        if masked(message) != message:
            record.msg, record.args = masked(message), ()
        if record.exc_info and record.exc_info[1] is not None:
            trace = logging.Formatter().formatException(record.exc_info)
            if masked(trace) != trace:  # else the handler's formatter formats it its own way
                record.exc_text = masked(trace)
        if record.stack_info:
            record.stack_info = masked(record.stack_info)
        return record

    masking.masks_secrets = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(masking)
