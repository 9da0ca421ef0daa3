"""The two rules of what a command shows (transforms/ui/safe.py): no secret in any text, and
no character a terminal would act on in text from data; and the places that apply them by
construction (ShardflowError, the log records, `transforms.files.redacted`)."""

from __future__ import annotations

import logging
import pickle
import time
import traceback

import pytest

from transforms.files import redacted
from transforms.ui.errors import ShardflowError, UsageError
from transforms.ui.safe import for_html, mask_logs, masked, printable, shown

SECRET = "s3cr3t-Pw"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("https://user:s3cr3t-Pw@host/ds", "https://user:***@host/ds"),
        ("s3://AKIA:s3cr3t-Pw/x+y@bucket/ds", "s3://AKIA:***@bucket/ds"),  # `/` in the key
        ("gs://user:s3cr3t-Pw@bucket/ds", "gs://user:***@bucket/ds"),
        ("postgresql://u:p@ss-s3cr3t-Pw@127.0.0.1:5432/db", "postgresql://u:***@127.0.0.1:5432/db"),
        ("https://:s3cr3t-Pw@host/x", "https://:***@host/x"),  # a token as the password
        ("x_s3://k:s3cr3t-Pw@b", "x_s3://k:***@b"),
        # in a sentence: every URI of it, and the words around them kept
        (
            "no manifest at 'gs://a:s3cr3t-Pw@b/ds/manifest.json' (nor at s3://c:s3cr3t-Pw@d/x)",
            "no manifest at 'gs://a:***@b/ds/manifest.json' (nor at s3://c:***@d/x)",
        ),
        # secret-looking query parameters, whatever the scheme (or none)
        ("gs://b/ds?token=s3cr3t-Pw", "gs://b/ds?token=***"),
        (
            "/data/ds?password=s3cr3t-Pw: no manifest.json",
            "/data/ds?password=***: no manifest.json",
        ),
        ("https://h/x?sv=2020&sig=s3cr3t-Pw&se=1", "https://h/x?sv=2020&sig=***&se=1"),
        ("https://h/x?X-Amz-Signature=s3cr3t-Pw", "https://h/x?X-Amz-Signature=***"),
        ("https://h/x?access_token=s3cr3t-Pw#top", "https://h/x?access_token=***#top"),
        ("https://h/x?api_key=s3cr3t-Pw", "https://h/x?api_key=***"),
        ("host=h password=s3cr3t-Pw dbname=d", "host=h password=*** dbname=d"),  # libpq
        # nothing to hide: unchanged
        ("https://user@host/ds", "https://user@host/ds"),
        ("gs://bucket/a:b@c", "gs://bucket/a:b@c"),
        ("https://host:8080/path", "https://host:8080/path"),
        ("https://h/x?split=train&take=3", "https://h/x?split=train&take=3"),
        ("password_file: pw.txt", "password_file: pw.txt"),
    ],
)
def test_masked_hides_every_password_and_secret_parameter_of_a_text(text, expected):
    assert masked(text) == expected
    assert masked(expected) == expected  # masking masked text changes nothing


def test_masked_takes_linear_time_on_hostile_text():
    hostile = ["a://b:" * 50_000, "?&pass" * 50_000, "s" * 300_000, "?token=" + "a:" * 150_000]
    started = time.monotonic()
    for text in hostile:
        masked(text)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    "text, expected",
    [
        ("na\x1b[31mme", "na\\x1b[31mme"),  # an escape sequence: ESC shown, not obeyed
        ("ring\x07", "ring\\x07"),
        ("over\rwrite", "over\\rwrite"),
        ("a\nb\tc", "a\\nb\\tc"),
        ("\u202eevil", "\\u202eevil"),  # right-to-left override
        ("\u2066iso\u2069", "\\u2066iso\\u2069"),  # bidi isolates
        ("c1\x85\x9b", "c1\\x85\\x9b"),  # C1 controls (NEL, CSI)
        ("del\x7f", "del\\x7f"),
        ("line\u2028sep", "line\\u2028sep"),
        ("bad\udc80byte", "bad\\udc80byte"),  # a lone surrogate: an undecodable byte
        ("Dreäm ☃ 日本 Ünïcödé", "Dreäm ☃ 日本 Ünïcödé"),  # printable text unchanged
    ],
)
def test_printable_escapes_what_a_terminal_would_act_on(text, expected):
    assert printable(text) == expected
    assert printable(expected) == expected


def test_printable_json_keeps_the_text_json_and_its_layout():
    import json

    text = json.dumps({"v": "a\u202e\x85\x7f\x1b"}, ensure_ascii=False, indent=1)
    escaped = printable(text, json=True)
    assert escaped == '{\n "v": "a\\u202e\\u0085\\u007f\\u001b"\n}'
    assert json.loads(escaped) == {"v": "a\u202e\x85\x7f\x1b"}


def test_for_html_escapes_markup_and_what_a_page_would_act_on():
    assert for_html('<b a="1">x</b>\u202eab\x1b\x85') == (
        "&lt;b a=&quot;1&quot;&gt;x&lt;/b&gt;\\u202eab\\x1b\\x85"
    )
    assert for_html("two\nlines\tand a tab") == "two\nlines\tand a tab"


def test_shown_masks_and_escapes():
    assert shown("s3://k:s3cr3t-Pw@b/\x1b[2J") == "s3://k:***@b/\\x1b[2J"


def test_a_shardflow_error_masks_its_message_even_in_a_traceback():
    error = UsageError(f"--data: https://user:{SECRET}@host/ds?token={SECRET}: no dataset")
    assert str(error) == "--data: https://user:***@host/ds?token=***: no dataset"
    assert SECRET not in repr(error)
    assert SECRET not in str(pickle.loads(pickle.dumps(error)))
    assert isinstance(error, ShardflowError) and isinstance(error, ValueError)
    try:
        raise error
    except UsageError as e:
        assert SECRET not in "".join(traceback.format_exception(e))


def test_redacted_is_the_one_rule():
    assert redacted(f"postgresql://u:{SECRET}@h/db") == "postgresql://u:***@h/db"
    assert redacted(f"gs://b/x?token={SECRET}") == "gs://b/x?token=***"


def test_mask_logs_masks_every_record_and_its_traceback(caplog):
    mask_logs()
    mask_logs()  # once, however often
    logger = logging.getLogger("tests.safe")
    with caplog.at_level(logging.INFO, logger="tests.safe"):
        logger.info("reading %s", f"s3://k:{SECRET}@b/ds")
        logger.warning(f"retrying gs://b/x?sig={SECRET}")
        try:
            raise OSError(f"cannot open https://u:{SECRET}@h/x")
        except OSError:
            logger.exception("failed")
        logger.info("plain %d", 3)
    assert SECRET not in caplog.text
    for shown_ in ("s3://k:***@b/ds", "gs://b/x?sig=***", "OSError: cannot open https://u:***@h/x"):
        assert shown_ in caplog.text
    assert "plain 3" in caplog.text
