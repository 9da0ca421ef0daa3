"""Security guarantees, each proven here (see tests/reliability/README.md, "Security").

- SQL: the query text comes only from the config; values read from the database never reach an
  SQL statement; identifiers of the config (table, partition_column) are quoted, so hostile names
  are names, not SQL; nothing a source reads can write to the database.
- Credentials (password_env / password_file) appear in no output, log or file of any run, also
  of failing runs.
- The config is YAML safe-loaded: Python tags are refused and never run.
- `transform.module` is a local Python file, checked by parsing, never imported at config time.
- Image labels from folder names are NFC text, never hold control characters or path
  separators, and folder names that are not UTF-8 reject their images instead of failing the job.
- A run writes only under OUTPUT (through its hidden staging sibling) and the temp location.

SQL statements are observed through `transforms.sources.database.Database.rows`, which every
statement the reader runs goes through (a subclass records them; the database is real).
"""

from __future__ import annotations

import base64
import decimal
import hashlib
import io
import json
import os
import re
import secrets
import sqlite3
import stat
import subprocess
import sys
import unicodedata
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from PIL import Image

from pipelines.etl import run
from transforms.contract.config import SourceSpec
from transforms.records import RawChunk, RecordError
from transforms.sources import database, images, sql

ROOT = Path(__file__).resolve().parent.parent.parent
SHARDFLOW = Path(sys.executable).parent / "shardflow"

# Values that would change a statement built by string formatting (SQL, DB-API placeholders of
# every paramstyle, Python formatting).
HOSTILE = [
    "'; DROP TABLE victims; --",
    "x' OR '1'='1",
    '" OR 1=1 --',
    "\\'; DROP TABLE victims; --",
    "%s",
    "%(id)s",
    "?",
    ":1",
    "$1",
    "{0}",
    "); DROP TABLE victims; --",
    "ʼ; DROP TABLE victims; --",  # U+02BC, which some drivers fold into a quote
]
HOSTILE_NAME = 'we"ird; DROP TABLE victims; --'


# --- SQL: statements ------------------------------------------------------------------------------


class RecordingDatabase(database.Database):
    """A real connection that records the text of every statement run through it."""

    statements: list[str]

    def rows(self, sql_text, chunk_rows, params=()):
        self.statements.append(sql_text)
        yield from super().rows(sql_text, chunk_rows, params)


def _read_recorded(source: SourceSpec) -> tuple[list[dict], list[dict], list[str]]:
    """(records, rejected, statements) of reading every partition of `source`."""
    db = RecordingDatabase(source)
    db.statements = []
    records, rejected = [], []
    try:
        for partition in sql.plan_partitions(db, source):
            for item in sql.read_partition(db, source, partition):
                if isinstance(item, RawChunk):
                    names = list(item.columns)
                    records += [dict(zip(names, row)) for row in zip(*item.columns.values())]
                else:
                    rejected.append(item)
    finally:
        db.close()
    return records, rejected, db.statements


def _source(**options) -> SourceSpec:
    return SourceSpec("s", "sql", None, sql.options(options))


def _hostile_rows() -> list[tuple]:
    """(id, text, weight) rows: every hostile value, a NULL id, ids spread for partitions."""
    rows = [(i * 10, value, float(i)) for i, value in enumerate(HOSTILE)]
    rows += [(None, HOSTILE[0], -1.0), (1000, "plain", 0.5)]
    return rows


_FIXED_LITERALS = {"'integer'", "'real'", "'-Infinity'", "'Infinity'"}


def _check_statements(statements: list[str], identifiers: list[str]) -> None:
    """No data value in any statement; the only string literals are the reader's own."""
    assert statements
    for statement in statements:
        # the reader's own placeholders (Partition.where), bound to computed bounds
        unbound = re.sub(r"(?<= )(\?|\$[12])(?= |$)", "<param>", statement)
        for value in HOSTILE:
            assert value not in unbound, (value, statement)
        bare = statement
        for name in identifiers:
            bare = bare.replace(sql.quote_identifier(name), "<id>")
        assert set(re.findall(r"'[^']*'", bare)) <= _FIXED_LITERALS, statement
        assert '"' not in bare, statement  # every quoted name is one of the config's


@pytest.fixture
def hostile_sqlite(tmp_path) -> str:
    path = str(tmp_path / "hostile.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE victims (id INTEGER)")
    conn.execute("INSERT INTO victims VALUES (1)")
    conn.execute("CREATE TABLE t (id INTEGER, v TEXT, w REAL)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)", _hostile_rows())
    name = sql.quote_identifier(HOSTILE_NAME)
    conn.execute(f"CREATE TABLE {name} ({name} INTEGER, v TEXT)")
    conn.executemany(f"INSERT INTO {name} VALUES (?, ?)", [(r[0], r[1]) for r in _hostile_rows()])
    conn.commit()
    conn.close()
    return path


def _sqlite_victims(path: str) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT * FROM victims").fetchall()
    finally:
        conn.close()


def _as_rows(records: list[dict], names: list[str]) -> list[tuple]:
    return sorted((tuple(r[n] for n in names) for r in records), key=repr)


@pytest.mark.parametrize("partitions", [1, 3, 20])
def test_sqlite_hostile_values_never_reach_a_statement_and_are_read_once(
    hostile_sqlite, partitions
):
    source = _source(
        url=f"sqlite:///{hostile_sqlite}", table="t", partition_column="id", partitions=partitions
    )
    records, rejected, statements = _read_recorded(source)
    assert rejected == []
    assert _as_rows(records, ["id", "v", "w"]) == sorted(_hostile_rows(), key=repr)
    _check_statements(statements, ["t", "id"])
    assert _sqlite_victims(hostile_sqlite) == [(1,)]


def test_sqlite_hostile_table_and_column_names_are_quoted_names(hostile_sqlite):
    source = _source(
        url=f"sqlite:///{hostile_sqlite}",
        table=HOSTILE_NAME,
        partition_column=HOSTILE_NAME,
        partitions=4,
    )
    records, _, statements = _read_recorded(source)
    expected = sorted(((r[0], r[1]) for r in _hostile_rows()), key=repr)
    assert _as_rows(records, [HOSTILE_NAME, "v"]) == expected
    _check_statements(statements, [HOSTILE_NAME])
    assert _sqlite_victims(hostile_sqlite) == [(1,)]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_partition_bounds_are_bound_parameters_not_sql_text(dialect):
    """The bounds come from MIN/MAX of the data: they reach the database as parameters."""
    cuts = [-5, 2.5, 1e300, decimal.Decimal("1E+2"), 2**70]
    words = {"<c>", "<", ">=", "AND", "IS", "NOT", "NULL", "?", "$1", "$2"}
    parts = sql.range_partitions(HOSTILE_NAME, cuts, True, dialect)
    for part in parts:
        bare = part.where.replace(sql.quote_identifier(HOSTILE_NAME), "<c>")
        assert set(bare.split()) <= words, bare
    assert [p.params for p in parts] == [
        (-5,),
        (-5, 2.5),
        (2.5, 1e300),
        (1e300, decimal.Decimal("1E+2")),
        (decimal.Decimal("1E+2"), 2**70),
        (2**70,),
        (),
    ]


def test_sqlite_sources_cannot_write_or_run_a_second_statement(hostile_sqlite):
    for query in ("SELECT 1 AS a; DROP TABLE victims", "DELETE FROM victims RETURNING id"):
        with pytest.raises(database.SqlError, match="query failed"):
            _read_recorded(_source(url=f"sqlite:///{hostile_sqlite}", query=query))
    assert _sqlite_victims(hostile_sqlite) == [(1,)]


def test_a_hostile_partition_column_fails_the_job_naming_it_and_drops_nothing(
    hostile_sqlite, tmp_path, capsys
):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        json.dumps(
            {
                "name": "s",
                "sources": [
                    {
                        "name": "t",
                        "format": "sql",
                        "options": {
                            "url": f"sqlite:///{hostile_sqlite}",
                            "table": "t",
                            "partition_column": "id; DROP TABLE victims",
                        },
                    }
                ],
                "features": {"id": {"type": "int"}},
                "output": {"path": str(tmp_path / "out")},
            }
        )
    )
    assert run(["--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "partition_column 'id; DROP TABLE victims' is not a column of the result" in err
    assert _sqlite_victims(hostile_sqlite) == [(1,)]
    assert not (tmp_path / "out").exists()


@pytest.fixture
def hostile_pg(postgres_server):
    name = sql.quote_identifier(HOSTILE_NAME)
    postgres_server.execute(f"DROP TABLE IF EXISTS victims, hostile, {name}")
    postgres_server.execute("CREATE TABLE victims (id int)", "INSERT INTO victims VALUES (1)")
    postgres_server.execute("CREATE TABLE hostile (id bigint, v text, w double precision)")
    postgres_server.execute(f"CREATE TABLE {name} ({name} bigint, v text)")
    for row in _hostile_rows():
        postgres_server.execute("INSERT INTO hostile VALUES (%s, %s, %s)", params=row)
        postgres_server.execute(f"INSERT INTO {name} VALUES (%s, %s)", params=row[:2])
    return postgres_server


def _pg_victims(server) -> list[tuple]:
    conn = server.connect()
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT * FROM victims")
        return [tuple(r) for r in cursor.fetchall()]
    finally:
        conn.close()


def test_postgres_hostile_values_and_names_never_change_a_statement(hostile_pg, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", hostile_pg.password)
    url = hostile_pg.url()
    source = _source(url=url, table="hostile", partition_column="id", partitions=3)
    records, rejected, statements = _read_recorded(source)
    assert rejected == []
    assert _as_rows(records, ["id", "v", "w"]) == sorted(_hostile_rows(), key=repr)
    _check_statements(statements, ["hostile", "id"])

    source = _source(url=url, table=HOSTILE_NAME, partition_column=HOSTILE_NAME, partitions=3)
    records, _, statements = _read_recorded(source)
    expected = sorted(((r[0], r[1]) for r in _hostile_rows()), key=repr)
    assert _as_rows(records, [HOSTILE_NAME, "v"]) == expected
    _check_statements(statements, [HOSTILE_NAME])

    # a text partition column holding hostile values is refused, its values never used
    with pytest.raises(database.SqlError, match="partition_column 'v' must be numeric"):
        _read_recorded(_source(url=url, table="hostile", partition_column="v"))
    # a name that is not a table stays a name; a second statement in the query is a syntax error
    with pytest.raises(database.SqlError, match="does not exist"):
        _read_recorded(_source(url=url, table='victims"; DROP TABLE victims; --'))
    with pytest.raises(database.SqlError, match="query failed: syntax error"):
        _read_recorded(_source(url=url, query="SELECT 1 AS a; DROP TABLE victims"))
    assert _pg_victims(hostile_pg) == [(1,)]


# --- credentials ----------------------------------------------------------------------------------

# The CLI entry point with every logger at DEBUG (the CLI itself logs WARNING and above).
_DEBUG_CLI = (
    "import logging; logging.basicConfig(level=logging.DEBUG); "
    "from pipelines import cli; cli.main()"
)


def _secret_forms(secret: str) -> list[bytes]:
    """The secret as it could leak: raw, URL-encoded, base64, JSON- and repr-escaped, hex."""
    raw = secret.encode()
    forms = {
        raw,
        quote(secret, safe="").encode(),
        quote_plus(secret).encode(),
        quote(secret).encode(),
        base64.b64encode(raw),
        base64.urlsafe_b64encode(raw),
        json.dumps(secret).encode()[1:-1],
        json.dumps(secret, ensure_ascii=False).encode()[1:-1],
        repr(secret).encode()[1:-1],
        raw.hex().encode(),
    }
    # a distinctive part of the secret, in case a message cuts it
    return sorted(forms) + [secret.split("'")[0].encode()]


def _files_under(folder: Path, skip: set[Path]) -> list[Path]:
    return [p for p in sorted(folder.rglob("*")) if p.is_file() and p not in skip]


@pytest.mark.slow
def test_the_password_appears_in_no_output_log_or_file(postgres_server, tmp_path):
    token = secrets.token_hex(6)
    secret = f"Shh-{token}-p@ss:w/rd'\" %+=&é☃"
    wrong = f"Wrong-{token}-p@ss:w/rd'\" %+=&é☃"
    role = "shardflow_secret_reader"
    conn = postgres_server.connect(superuser=True)
    try:
        cursor = conn.cursor()
        cursor.execute(f"DROP ROLE IF EXISTS {role}")
        literal = secret.replace("'", "''")  # utility statements take no parameters
        cursor.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{literal}'")
    finally:
        conn.close()
    postgres_server.execute(
        "DROP TABLE IF EXISTS secret_rows",
        "CREATE TABLE secret_rows (id int, n text)",
        "INSERT INTO secret_rows SELECT i, i::text FROM generate_series(1, 40) i",
        "INSERT INTO secret_rows VALUES (41, 'not a number')",  # rejected: n: not an integer
        f"GRANT SELECT ON secret_rows TO {role}",
    )
    url = f"postgresql://{role}@{postgres_server.host}:{postgres_server.port}/"
    url += postgres_server.database
    inputs, home, temp, cwd = (tmp_path / d for d in ("inputs", "home", "tmp", "cwd"))
    for d in (inputs, home, temp, cwd):
        d.mkdir()
    password_file = inputs / "pw.txt"
    password_file.write_text(secret + "\n")
    password_file.chmod(stat.S_IRUSR | stat.S_IWUSR)

    def config(name: str, **options) -> Path:
        path = inputs / f"{name}.yaml"
        source = {"name": "db", "format": "sql", "options": {"url": url, **options}}
        path.write_text(
            json.dumps(
                {
                    "name": name,
                    "sources": [source],
                    "features": {"id": {"type": "int"}, "n": {"type": "int"}},
                    "output": {"path": str(tmp_path / "out" / name)},
                }
            )
        )
        return path

    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(HOME=str(home), TMPDIR=str(temp), TF_CPP_MIN_LOG_LEVEL="2")
    runs = [
        (
            "env",
            config("env", table="secret_rows", password_env="SF_SECRET", partition_column="id"),
            {"SF_SECRET": secret},
            0,
        ),
        ("file", config("file", query="SELECT * FROM secret_rows", password_file="pw.txt"), {}, 0),
        ("wrong", config("wrong", table="secret_rows"), {"PGPASSWORD": wrong}, 1),
        (
            "query",
            config("query", query="SELECT nope FROM secret_rows", password_env="SF_SECRET"),
            {"SF_SECRET": secret},
            1,
        ),
    ]
    logs = []
    for name, cfg, extra, code in runs:
        done = subprocess.run(
            [sys.executable, "-c", _DEBUG_CLI, "etl", "--config", str(cfg)],
            cwd=cwd,
            env={**env, **extra},
            capture_output=True,
            timeout=300,
        )
        logs.append(done.stdout + done.stderr)
        assert done.returncode == code, (name, done.stderr.decode()[-3000:])
    text = [log.decode(errors="replace") for log in logs]
    assert "1  n: not an integer" in text[0] and "1  n: not an integer" in text[1]
    assert f'password authentication failed for user "{role}"' in text[2]
    assert 'query failed: column "nope" does not exist' in text[3]
    assert (tmp_path / "out" / "env" / "rejected").is_dir()
    assert sorted(os.listdir(tmp_path / "out")) == ["env", "file"]  # failed runs left nothing

    haystacks = [(f"output of run {i}", log) for i, log in enumerate(logs)]
    haystacks += [(str(p), p.read_bytes()) for p in _files_under(tmp_path, skip={password_file})]
    assert len(haystacks) > 10
    for form in _secret_forms(secret) + _secret_forms(wrong):
        leaks = [where for where, data in haystacks if form in data]
        assert leaks == [], (form, leaks)


# --- YAML -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tag",
    [
        "!!python/object/apply:os.system [{cmd}]",
        "!!python/object/new:subprocess.Popen [[sh, -c, {cmd}]]",
        "!!python/name:os.system",
        "!!python/module:os",
    ],
)
def test_python_tags_in_the_config_are_refused_and_never_run(tmp_path, capsys, tag):
    marker = tmp_path / "pwned"
    cmd = json.dumps(f"touch {marker}")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: x\nsources: {tag.format(cmd=cmd)}\noutput: {{path: out}}\n")
    assert run(["--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"shardflow etl: error: --config: {str(cfg)!r}") and "(line 2)" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not marker.exists()


def test_a_refused_python_tag_is_named_in_the_message(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: !!python/name:os.system\n")
    assert run(["--config", str(cfg)]) == 2
    assert "python/name:os.system" in capsys.readouterr().err


# --- transform.module -----------------------------------------------------------------------------

# Writes a marker file next to itself when imported.
MARKER_MODULE = """
import pathlib
pathlib.Path(__file__).with_name("imported").write_text("yes")

def preprocessing_fn(inputs):
    return dict(inputs)
"""


def _module_config(folder: Path, module: str, data: str = "rows.jsonl") -> Path:
    cfg = folder / "c.yaml"
    cfg.write_text(
        json.dumps(
            {
                "name": "m",
                "sources": [{"name": "r", "format": "jsonl", "path": data}],
                "features": {"x": {"type": "float"}},
                "transform": {"module": module},
                "output": {"path": "out"},
            }
        )
    )
    return cfg


@pytest.mark.parametrize(
    "module, message",
    [
        ("prep", "transform.module: '{d}/prep' must be a Python file (.py)"),
        ("mods.prep", "transform.module: '{d}/mods.prep' must be a Python file (.py)"),
        ("mods", "transform.module: '{d}/mods' must be a Python file (.py)"),
        ("mods.py", "transform.module: cannot read '{d}/mods.py': Is a directory"),
        ("gs://bucket/prep.py", "transform.module: 'gs://bucket/prep.py': the module must be a"),
        ("missing.py", "transform.module: cannot read '{d}/missing.py'"),
    ],
)
def test_a_module_that_is_not_a_local_python_file_is_refused(tmp_path, capsys, module, message):
    # (gs:// and missing files are also covered by tests/pipelines/test_config.py)
    (tmp_path / "rows.jsonl").write_text('{"x": 1}\n')
    (tmp_path / "prep.py").write_text(MARKER_MODULE)
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "prep.py").write_text(MARKER_MODULE)
    (tmp_path / "mods.py").mkdir()
    assert run(["--config", str(_module_config(tmp_path, module))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shardflow etl: error: " + message.format(d=tmp_path)), err
    assert err.count("\n") == 1
    assert not (tmp_path / "imported").exists() and not (tmp_path / "mods" / "imported").exists()


def test_a_valid_module_is_not_imported_when_the_config_is_checked(tmp_path, capsys):
    # The module passes its checks (parsed, defines preprocessing_fn); the run then stops at the
    # next check (no input file): the module was never run. See also tests/pipelines/
    # test_config.py::test_transform_module_is_resolved_and_checked_without_running_it.
    (tmp_path / "prep.py").write_text(MARKER_MODULE)
    assert run(["--config", str(_module_config(tmp_path, "prep.py", "none.jsonl"))]) == 2
    assert "sources[0].path: no files match" in capsys.readouterr().err
    assert not (tmp_path / "imported").exists()


def test_a_module_without_the_py_extension_is_refused(tmp_path, capsys):
    (tmp_path / "rows.jsonl").write_text('{"x": 1}\n')
    (tmp_path / "prep.txt").write_text(MARKER_MODULE)
    assert run(["--config", str(_module_config(tmp_path, "prep.txt", "none.jsonl"))]) == 2
    assert "transform.module:" in capsys.readouterr().err
    assert not (tmp_path / "imported").exists()


# --- image labels ---------------------------------------------------------------------------------


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (3, 2), (10, 20, 30)).save(out, "PNG")
    return out.getvalue()


def _parse_image(path: str, root: str, **options):
    source = SourceSpec("photos", "images", root + "/", images.options(options))
    items = list(images.parse_images(io.BytesIO(_png()), path, source))
    assert len(items) == 1
    item = items[0]
    if isinstance(item, RawChunk):
        return {name: item.values(name)[0] for name in item.columns}, None
    return None, item


NFC, NFD = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")


def test_nfc_and_nfd_folder_names_give_the_same_nfc_label():
    assert NFC != NFD
    for name in (NFC, NFD):
        fields, _ = _parse_image(f"/data/{name}/1.png", "/data")
        assert fields["label"] == NFC
        assert fields["filename"] == f"{name}/1.png"  # the file's own name, to find it
    fields, _ = _parse_image(f"/data/{NFD}_01.png", "/data", label_regex=r"^([^_]+)_")
    assert fields["label"] == NFC


@pytest.mark.parametrize(
    "folder, reason",
    [
        ("tab\there", images.CONTROL_LABEL),
        ("new\nline", images.CONTROL_LABEL),
        ("esc\x1b[31m", images.CONTROL_LABEL),
        ("del\x7f", images.CONTROL_LABEL),
        ("back\\slash", images.SEPARATOR_LABEL),
        ("bad\udcff", images.NOT_UTF8_LABEL),  # os.fsdecode of the byte 0xff
    ],
)
def test_folder_names_that_cannot_be_labels_reject_their_images(folder, reason):
    fields, rejected = _parse_image(f"/data/{folder}/1.png", "/data")
    assert fields is None
    assert rejected.reason == reason
    json.dumps(rejected.to_json()).encode("utf-8")  # writable: no lone surrogate anywhere
    if "\udcff" in folder:
        assert rejected.location == "/data/bad\\xff/1.png:1"


def test_labels_keep_spaces_punctuation_and_non_latin_text():
    for name in ("Golden Retriever", "a.b-c_d (2)", "猫", "ελιά", "'; DROP TABLE x; --"):
        fields, _ = _parse_image(f"/data/{name}/1.png", "/data")
        assert fields["label"] == name


def test_a_regex_label_spanning_folders_is_rejected():
    _, rejected = _parse_image("/data/a/cat/1.png", "/data", label_regex=r"^(.+)/[^/]+$")
    assert rejected.reason == images.SEPARATOR_LABEL
    with pytest.raises(RecordError, match="label: holds a path separator"):
        images.clean_label("a/b")


def test_a_file_name_that_is_not_utf8_is_rejected():
    _, rejected = _parse_image("/data/cat/\udcfe.png", "/data")
    assert rejected.reason == images.NOT_UTF8_PATH
    assert json.loads(rejected.record)["filename"] == "cat/\\xfe.png"


@pytest.mark.slow
def test_an_image_tree_with_unusual_folder_names_is_read_with_clean_labels(tmp_path, capsys):
    data = os.fsencode(tmp_path / "data")
    folders = {
        NFC.encode(): NFC,
        NFD.encode(): NFC,
        b"bad\xff": None,
        b"tab\there": None,
        b"plain": "plain",
    }
    for folder in folders:
        os.makedirs(os.path.join(data, folder))
        with open(os.path.join(data, folder, b"1.png"), "wb") as f:
            f.write(_png())
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "name: labels\n"
        "sources: [{name: photos, format: images, path: data/}]\n"
        "features: {image: {type: image}, label: {type: string}}\n"
        "splits: {train: 1.0}\n"
        "output: {path: out}\n"
    )
    assert run(["--config", str(cfg)]) == 0, capsys.readouterr().err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["rejected"]["reasons"] == {
        images.NOT_UTF8_LABEL: 1,
        images.CONTROL_LABEL: 1,
    }
    import tensorflow as tf

    labels = []
    for f in manifest["splits"]["train"]["files"]:
        path = str(tmp_path / "out" / f["path"])
        for record in tf.data.TFRecordDataset(path, compression_type="GZIP"):
            example = tf.train.Example.FromString(record.numpy())
            labels.append(example.features.feature["label"].bytes_list.value[0].decode())
    assert sorted(labels) == sorted(v for v in folders.values() if v is not None)
    lines = [
        json.loads(line)
        for p in sorted((tmp_path / "out" / "rejected").iterdir())
        for line in p.read_text(encoding="utf-8").splitlines()
    ]
    assert sorted(r["location"] for r in lines) == [
        f"{tmp_path}/data/bad\\xff/1.png:1",
        f"{tmp_path}/data/tab\there/1.png:1",
    ]


# --- nothing written outside OUTPUT and the temp location -----------------------------------------

SPLIT_PREP = """
import tensorflow_transform as tft

def preprocessing_fn(inputs):
    out = dict(inputs)
    out["x"] = tft.scale_to_z_score(inputs["x"])
    return out
"""


def _snapshot(root: Path) -> dict[str, tuple]:
    """relative path → ("dir",) or (size, mtime_ns, sha256) of everything under `root`."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            if stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[rel] = (st.st_size, st.st_mtime_ns, digest)
    return out


def _changed(before: dict, after: dict) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def _outside(changed: set[str]) -> set[str]:
    """Changed paths outside OUTPUT (`out`) and the temp location (`tmp`)."""
    return {p for p in changed if p.split("/")[0] not in ("out", "tmp")}


@pytest.fixture(scope="module")
def isolated_runs(tmp_path_factory) -> dict:
    """Two CLI runs with tf.Transform (a first run, then a failing --overwrite run), each
    with cwd, HOME and TMPDIR in empty folders; the changes each made to the whole test tree."""
    root = tmp_path_factory.mktemp("isolated")
    inputs, home, temp, cwd = (root / d for d in ("inputs", "home", "tmp", "cwd"))
    for d in (inputs, home, temp, cwd):
        d.mkdir()
    with open(inputs / "rows.jsonl", "w") as f:
        for i in range(60):
            value = "bad" if i == 5 else i % 2
            f.write(json.dumps({"id": i, "x": i * 1.5, "c": "abc"[i % 3], "y": value}) + "\n")
    (inputs / "prep.py").write_text(SPLIT_PREP)
    base = (
        "name: sec\n"
        "sources: [{name: rows, format: jsonl, path: rows.jsonl}]\n"
        "key: id\n"
        "features: {id: {type: int}, x: {type: float}, c: {type: string}, y: {type: int}}\n"
        "label: y\n"
        "splits: {train: 0.8, eval: 0.2}\n"
        "transform: {module: prep.py}\n"
    )
    (inputs / "c.yaml").write_text(base + f"output: {{path: {root / 'out'}}}\n")
    # fails after the analysis: one record is rejected, none may be
    (inputs / "fail.yaml").write_text(base + f"output: {{path: {root / 'out'}, max_rejected: 0}}\n")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONDONTWRITEBYTECODE", "KERAS_HOME", "TEMP", "TMP")
        and not k.startswith("XDG_")
    }
    env.update(HOME=str(home), TMPDIR=str(temp), TF_CPP_MIN_LOG_LEVEL="2")
    results = {}
    for name, config, args, code in (
        ("first", "c.yaml", [], 0),
        ("failing", "fail.yaml", ["--overwrite"], 1),  # would replace the first: the same paths
    ):
        before = _snapshot(root)
        done = subprocess.run(
            [str(SHARDFLOW), "etl", "--config", str(inputs / config), *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == code, (name, done.stderr[-3000:])
        results[name] = (before, _snapshot(root))
    results["root"] = root
    return results


@pytest.mark.slow
@pytest.mark.parametrize("name", ["first", "failing"])
def test_a_run_writes_only_output_and_the_temp_location(isolated_runs, name):
    before, after = isolated_runs[name]
    changed = _changed(before, after)
    assert _outside(changed) == set()
    # inputs untouched, cwd empty, no staging sibling of OUTPUT left
    assert {p for p in before if p.startswith("inputs/")} <= after.keys()
    assert all(before[p] == after[p] for p in before if p.startswith("inputs/"))
    assert not any(p.startswith("cwd/") for p in after)
    assert {p for p in after if "/" not in p} == {"inputs", "home", "tmp", "cwd", "out"}
    # Beam's and tf.Transform's temporary folders are removed; TensorFlow's autograph leaves the
    # bytecode of the code it generates in the temp location, Keras its config file
    keras = {"tmp/shardflow-keras", "tmp/shardflow-keras/keras.json"}
    leftovers = {p for p in after if p.startswith("tmp/")} - {"tmp/__pycache__"} - keras
    autograph = re.compile(r"tmp/__pycache__/__autograph_generated_file\w+\.[\w-]+\.pyc")
    assert all(autograph.fullmatch(p) for p in leftovers), leftovers
    outputs = {p for p in changed if p.startswith("out")}
    if name == "failing":
        assert outputs == set()  # the dataset of the run before is untouched
    else:
        assert "out/manifest.json" in outputs and "out/transform/transform_fn" in after


@pytest.mark.slow
def test_a_transform_run_writes_nothing_in_home_or_next_to_the_module(isolated_runs):
    before, after = isolated_runs["first"]
    assert _outside(_changed(before, after)) == set()


# --- a URI with a password where a file path belongs --------------------------------------------

SECRET_URIS = [
    "postgresql://etl:s3cret-9@db.example.com/sales",
    "mysql://root:s3cret-9@127.0.0.1:3306/db",
    "https://user:s3cret-9@example.com/data.csv",
    "sqlite:///var/data/s3cret-9.db",
]


@pytest.mark.parametrize("uri", SECRET_URIS)
def test_init_and_etl_refuse_a_database_url_as_a_path_without_repeating_its_password(
    tmp_path, capsys, uri
):
    from pipelines.init import main as init

    code = init(["--source", uri])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    shown = uri.replace(":s3cret-9@", ":***@") if "@" in uri else uri
    assert err.splitlines()[-1] == (
        f"shardflow init: error: --source: {shown!r} is not a file location (a local path or "
        "gs://...); a database is read with format: sql"
    )
    config = tmp_path / "c.yaml"
    config.write_text(
        f"name: x\nsources: [{{name: s, format: csv, path: {json.dumps(uri)}}}]\n"
        f"features: {{a: {{type: int}}}}\noutput: {{path: {json.dumps(str(tmp_path / 'o'))}}}\n"
    )
    assert run(["--config", str(config)]) == 2
    out, err = capsys.readouterr()
    assert err.splitlines()[-1] == (
        f"shardflow etl: error: sources[0].path: {shown!r} is not a file location (a local "
        "path or gs://...); a database is read with format: sql"
    )
    if "@" in uri:
        assert "s3cret" not in out + err
