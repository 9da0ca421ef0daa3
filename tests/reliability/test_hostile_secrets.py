"""The hostile corpus, part 3: secrets in what a command is given, and text from data that would
act on a terminal (tests/reliability/hostile.py has the harness and its invariants).

Two rules, one function each (transforms/ui/safe.py), whatever the command:
- a password in a URI (`https://user:PW@host`, `s3://KEY:SECRET@bucket`) or a secret-looking
  query parameter (`?token=`, `&sig=`, `?password=`) is never printed: the harness's `secret=`;
- text from data (a CSV header, a string value) never reaches the terminal with a character it
  would act on (ESC of an escape sequence, a bell, a carriage return, a C1 control, a bidi
  override): every case here checks all it printed (`_ACTIVE`), and the visible escape it must
  show instead (`says`).
"""

from __future__ import annotations

import re
import shutil
import traceback
from pathlib import Path

import pytest

from pipelines.etl import run as etl
from tests.reliability.hostile import Case, config, run_case
from tests.trainer.datasets import make_rows, write_dataset
from trainer.errors import first_line

SECRET = "s3cr3t-Pw0rd"
# What a terminal acts on; a printed line may end in "\n" and nothing else of these.
_ACTIVE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# A value and a header cell holding an escape sequence, a bidi override, a C1 control, a bell.
HOSTILE = "Emp\x1b[31meror\u202e\x85\x07"
SHOWN = "Emp\\x1b[31meror\\u202e\\x85\\x07"  # as `printable` shows it
SHOWN_JSON = "Emp\\u001b[31meror\\u202e\\u0085\\u0007"  # inside a JSON string
HEADER = "na\x1b[31mme\x07"

_SOURCE: dict[str, Path] = {}


def _csv(hostile: bool) -> str:
    lines = [f"id,species,{HEADER}" if hostile else "id,species"]
    for i in range(60):
        species = HOSTILE if hostile and i % 5 == 0 else ("Adelie", "Gentoo")[i % 2]
        lines.append(f"{i},{species},x" if hostile else f"{i},{species}")
    return "\n".join(lines) + "\n"


def _report_shows_escapes(d: Path) -> None:
    """The run report holds the hostile value as visible escapes, no character a page acts on
    (a bidi override would reverse the rest of its cell)."""
    page = (d / "out" / "report.html").read_text(encoding="utf-8")
    assert "Emp\\x1b[31meror\\u202e\\x85\\x07" in page
    assert _ACTIVE.search(page.replace("\t", " ").replace("\r", " ")) is None


def _etl_config(d: Path, name: str, hostile: bool, features: dict | None = None, **top) -> str:
    (d / f"{name}.csv").write_text(_csv(hostile))
    features = features or {"id": {"type": "int"}, "species": {"type": "string"}}
    return config(
        d, [{"name": "s", "format": "csv", "path": f"{name}.csv"}], features, key="id", **top
    )


@pytest.fixture(scope="module", autouse=True)
def source_datasets(tmp_path_factory):
    """v1 (plain) and v2 (a value and a header cell with escape codes), v2 validated against v1
    without blocking: the datasets the inspect and validate cases read; and a trainer dataset."""
    for name, hostile in (("v1", False), ("v2", True)):
        d = tmp_path_factory.mktemp(name)
        baseline = ["--baseline", str(_SOURCE["v1"])] if hostile else []
        path = _etl_config(d, name, hostile, validation={"block": []})
        assert etl(["--config", path, *baseline]) == 0
        _SOURCE[name] = d / "out"
    _SOURCE["penguins"] = write_dataset(
        tmp_path_factory.mktemp("penguins") / "d", make_rows(40), splits={"train": 1}
    ).root


def _copy(d: Path, name: str) -> str:
    shutil.copytree(_SOURCE[name], d / name)
    return str(d / name)


def _inspect(*args: str):
    return lambda d: ("inspect", [a.replace("{d}", str(d)) for a in args])


def _validate(*args: str):
    return lambda d: ("validate", [a.replace("{d}", str(d)) for a in args])


def _train(data: str):
    return lambda d: (
        "train", ["--data", data.replace("{d}", str(d)), "--model-dir", str(d / "m"),
                  "--epochs", "1"],
    )  # fmt: skip


def _predict(data: str):
    return lambda d: (
        "predict", ["--model-dir", str(d / "m"), "--data", data.replace("{d}", str(d))]
    )  # fmt: skip


HTTPS = f"https://user:{SECRET}@files.example/ds"
S3 = f"s3://AKIAEXAMPLE:{SECRET}/x+y@bucket/ds"  # an AWS secret key holds `/` and `+`
LOCAL_TOKEN = "{d}/ds?token=" + SECRET
LOCAL_SIG = "{d}/ds?sig=" + SECRET + "&password=" + SECRET

SECRETS = [
    Case("inspect-https-password", "secret", _inspect(HTTPS), 2,
         "https://user:***@files.example/ds", secret=SECRET),
    Case("inspect-s3-key-with-slash", "secret", _inspect(S3), 2,
         "s3://AKIAEXAMPLE:***@bucket/ds", secret=SECRET),
    Case("inspect-query-token", "secret", _inspect(LOCAL_TOKEN), 2, "ds?token=***",
         secret=SECRET),
    Case("validate-https-password", "secret", _validate(HTTPS), 2,
         "https://user:***@files.example/ds", secret=SECRET),
    Case("validate-s3-key-with-slash", "secret", _validate(S3), 2,
         "s3://AKIAEXAMPLE:***@bucket/ds", secret=SECRET),
    Case("validate-query-sig-and-password", "secret", _validate(LOCAL_SIG), 2,
         "ds?sig=***&password=***", secret=SECRET),
    Case("validate-baseline-https-password", "secret",
         lambda d: ("validate", [_copy(d, "v2"), "--baseline", HTTPS]), 2,
         "https://user:***@files.example/ds", secret=SECRET, keep=("v2",)),
    Case("train-https-password", "secret", _train(HTTPS), 2,
         "https://user:***@files.example/ds", secret=SECRET),
    Case("train-query-token", "secret", _train(LOCAL_TOKEN), 2, "ds?token=***",
         secret=SECRET),
    Case("train-second-data-s3", "secret",
         lambda d: ("train", ["--data", _copy(d, "penguins"), S3, "--model-dir", str(d / "m")]),
         2, "s3://AKIAEXAMPLE:***@bucket/ds", secret=SECRET, keep=("penguins",)),
    Case("predict-data-https-password", "secret", _predict(HTTPS), 2,
         "https://user:***@files.example/ds", secret=SECRET),
    Case("predict-data-query-password", "secret", _predict("{d}/ds?password=" + SECRET), 2,
         "ds?password=***", secret=SECRET),
    Case("init-source-query-token", "secret",
         lambda d: ("init", ["--source", f"{d}/a.csv?token={SECRET}", "--output",
                             str(d / "c.yaml")]),
         2, "a.csv?token=***", secret=SECRET),
    Case("etl-source-path-query-sig", "secret",
         lambda d: ("etl", ["--config", config(d, [{"name": "s", "format": "csv",
                                                    "path": f"a.csv?sig={SECRET}"}],
                                               {"id": {"type": "int"}})]),
         2, "a.csv?sig=***", secret=SECRET),
]  # fmt: skip

TERMINAL = [
    Case("etl-escape-codes-in-a-header-and-a-value", "terminal",
         lambda d: ("etl", ["--config", _etl_config(d, "h", hostile=True)]), 0,
         "na\\x1b[31mme\\x07", check=_report_shows_escapes),
    Case("etl-escape-codes-in-a-rejected-value", "terminal",
         lambda d: ("etl", ["--config", _etl_config(
             d, "h", hostile=True,
             features={"id": {"type": "int"},
                       "species": {"type": "string", "values": ["Adelie", "Gentoo"]}},
             output={"path": "out", "max_rejected_fraction": 0.5})]), 0,
         f"values: '{SHOWN}' (12)"),
    Case("inspect-escape-codes-in-values", "terminal",
         lambda d: ("inspect", [_copy(d, "v2"), "--split", "train", "--take", "60"]), 0,
         SHOWN_JSON, keep=("v2",)),
    Case("inspect-escape-codes-in-statistics", "terminal",
         lambda d: ("inspect", [_copy(d, "v2"), "--stats", "--take", "0"]), 0,
         "Emp\\u001b[31meror", keep=("v2",)),
    Case("inspect-escape-codes-in-the-path", "terminal", _inspect("{d}/\x1b[2J\u202eds"), 2,
         "/\\x1b[2J\\u202eds"),
    Case("validate-escape-codes-in-anomalies", "terminal",
         lambda d: ("validate", [_copy(d, "v2"), "--baseline", _copy(d, "v1")]), 0,
         SHOWN, keep=("v1", "v2")),
    Case("validate-escape-codes-in-json-anomalies", "terminal",
         lambda d: ("validate", [_copy(d, "v2"), "--baseline", _copy(d, "v1"), "--json"]), 0,
         SHOWN_JSON, keep=("v1", "v2")),
    Case("validate-escape-codes-in-the-path", "terminal", _validate("{d}/\x1b]0;pwned\x07ds"),
         2, "/\\x1b]0;pwned\\x07ds"),
]  # fmt: skip

CASES = SECRETS + TERMINAL


class _Recorder:
    """capfd as run_case uses it, keeping what the command printed."""

    def __init__(self, capfd):
        self._capfd = capfd
        self.printed = ""

    def readouterr(self):
        captured = self._capfd.readouterr()
        self.printed += captured.out + captured.err
        return captured


def _param(case: Case):
    return pytest.param(case, id=case.name)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_hostile_secret_or_terminal_text(case: Case, tmp_path: Path, capfd):
    recorder = _Recorder(capfd)
    run_case(case, tmp_path, recorder)
    active = sorted({repr(c) for c in _ACTIVE.findall(recorder.printed)})
    assert active == [], recorder.printed[-3000:]


def test_the_corpus_has_its_cases():
    assert len(CASES) >= 12 and len({c.name for c in CASES}) == len(CASES)


# --- the readers and the error text of TensorFlow: no command prints them, a traceback does ---


@pytest.mark.parametrize("data", [HTTPS, S3, "{d}/ds?token=" + SECRET])
def test_the_readers_errors_never_hold_a_secret(data, tmp_path):
    from trainer.dataset.union import load_datasets

    with pytest.raises(ValueError) as raised:
        load_datasets(data.replace("{d}", str(tmp_path)))
    assert "***" in str(raised.value)
    assert SECRET not in "".join(traceback.format_exception(raised.value))


def test_a_tensorflow_error_line_is_masked_and_escaped():
    import tensorflow as tf

    error = tf.errors.NotFoundError(None, None, f"{HTTPS}/manifest.json; no such file\x1b[2J")
    assert first_line(error) == (
        "NotFoundError: https://user:***@files.example/ds/manifest.json; no such file\\x1b[2J"
    )


def test_the_etl_failure_line_is_masked_and_escaped():
    from pipelines.summary import failure_reason

    error = RuntimeError(
        f"Traceback ...\nOSError: cannot open {S3}/a.csv\x1b[2J [while running 'Read']"
    )
    assert (
        failure_reason(error) == "OSError: cannot open s3://AKIAEXAMPLE:***@bucket/ds/a.csv\\x1b[2J"
    )
