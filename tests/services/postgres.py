"""A throw-away PostgreSQL server on 127.0.0.1 for tests: a real server, started and stopped here.

`postgres_server` is a session fixture. It finds PostgreSQL's server programs (`initdb`, `pg_ctl`,
`postgres`) on PATH or in Debian's `/usr/lib/postgresql/<version>/bin`, and when there are none
installs Debian's `postgresql` package (`apt-get install -y postgresql`, after an `apt-get update`
only when the first try fails; this needs root, as `make test` on a fresh machine has). It then
creates a cluster in a temporary folder, starts it on a free port bound to 127.0.0.1 only (the
Unix socket goes to the same folder, never to /var/run), creates a database and a login role with
a random password (scram-sha-256 authentication), and stops the server (`pg_ctl stop`) and deletes
the folder at the end of the session. PostgreSQL refuses to run as root: as root, the cluster
belongs to the `postgres` system user and its programs run through `runuser -u postgres --`.

`tests/conftest.py` makes it available to every test; the server is started once per process
(on first use) and stopped once.
"""

from __future__ import annotations

import atexit
import dataclasses
import glob
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from tests.services import apt

SYSTEM_USER = "postgres"
DATABASE = "shardflow_test"
ROLE = "shardflow"
_DEBIAN_BIN_DIRS = "/usr/lib/postgresql/*/bin"
_PROGRAMS = ("initdb", "pg_ctl", "postgres")
_START_ATTEMPTS = 3


@dataclasses.dataclass(frozen=True)
class PostgresServer:
    """A running server: where it listens, the test database, its login role and password."""

    host: str
    port: int
    database: str
    user: str
    password: str
    superuser_password: str
    data_dir: str

    def url(self, database: str | None = None) -> str:
        """The server's URL without a password, as a config would hold it."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database or self.database}"

    def connect(self, *, superuser: bool = False):
        """A pg8000 DB-API connection to the test database (autocommit)."""
        import pg8000.dbapi

        conn = pg8000.dbapi.connect(
            user=SYSTEM_USER if superuser else self.user,
            password=self.superuser_password if superuser else self.password,
            host=self.host,
            port=self.port,
            database=self.database,
        )
        conn.autocommit = True
        return conn

    def execute(self, *statements: str, params: tuple = ()) -> None:
        """Runs statements in the test database as the test role (each with `params`)."""
        conn = self.connect()
        try:
            cursor = conn.cursor()
            for statement in statements:
                cursor.execute(statement, params)
        finally:
            conn.close()


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server programs here, and installing them failed."""


def server_bin_dir() -> str | None:
    """The folder of initdb, pg_ctl and postgres: on PATH, else the newest Debian version's."""
    found = shutil.which("initdb")
    if found:
        folder = os.path.dirname(os.path.realpath(found))
        if all(os.access(os.path.join(folder, p), os.X_OK) for p in _PROGRAMS):
            return folder
    candidates = [
        folder
        for folder in glob.glob(_DEBIAN_BIN_DIRS)
        if all(os.access(os.path.join(folder, p), os.X_OK) for p in _PROGRAMS)
    ]
    return max(candidates, key=_version_key, default=None)


def _version_key(folder: str) -> tuple[int, ...]:
    version = os.path.basename(os.path.dirname(folder))
    return tuple(int(n) for n in re.findall(r"\d+", version)) or (0,)


def install_postgres() -> str:
    """Installs Debian's PostgreSQL packages; returns the server programs' folder."""
    if os.geteuid() != 0:
        raise PostgresUnavailable(
            "PostgreSQL's server programs (initdb, pg_ctl) are not installed and installing "
            "them needs root: run `apt-get install -y postgresql` as root"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "--no-install-recommends", "postgresql"]
    result = subprocess.run(install, env=env, check=False, capture_output=True, text=True)
    if result.returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, check=False, capture_output=True, text=True)
        result = subprocess.run(install, env=env, check=False, capture_output=True, text=True)
    folder = server_bin_dir()
    if result.returncode != 0 or folder is None:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise PostgresUnavailable(f"`{' '.join(install)}` failed:\n{tail}")
    return folder


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Cluster:
    """One throw-away cluster: initdb, start, create the role and database, stop, delete."""

    def __init__(self, bin_dir: str):
        self._bin = bin_dir
        self._as_root = os.geteuid() == 0
        self.root = tempfile.mkdtemp(prefix="shardflow-pg-")
        self.data_dir = os.path.join(self.root, "data")
        self.log = os.path.join(self.root, "server.log")
        self._running = False
        if self._as_root:
            owner = pwd.getpwnam(SYSTEM_USER)
            os.chown(self.root, owner.pw_uid, owner.pw_gid)

    def _run(self, program: str, *args: str) -> subprocess.CompletedProcess:
        command = [os.path.join(self._bin, program), *args]
        if self._as_root:
            command = ["runuser", "-u", SYSTEM_USER, "--", *command]
        return subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)

    def _check(self, result: subprocess.CompletedProcess, what: str) -> None:
        if result.returncode != 0:
            log = ""
            if os.path.exists(self.log):
                with open(self.log) as f:
                    log = "\n".join(f.read().strip().splitlines()[-15:])
            raise RuntimeError(f"{what} failed ({result.returncode}):\n{result.stderr}{log}")

    def init(self, superuser_password: str) -> None:
        pwfile = os.path.join(self.root, "pwfile")
        with open(pwfile, "w") as f:
            f.write(superuser_password + "\n")
        if self._as_root:
            owner = pwd.getpwnam(SYSTEM_USER)
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        os.chmod(pwfile, 0o600)
        result = self._run(
            "initdb",
            "-D",
            self.data_dir,
            "-U",
            SYSTEM_USER,
            f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256",
            "--auth-local=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        os.remove(pwfile)
        self._check(result, "initdb")

    def start(self, port: int) -> None:
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(port),
            "unix_socket_directories": f"'{self.root}'",
            # a throw-away cluster: durability is not wanted, speed is
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "40",
            "shared_buffers": "16MB",
        }
        with open(os.path.join(self.data_dir, "postgresql.auto.conf"), "a") as f:
            f.writelines(f"{name} = {value}\n" for name, value in settings.items())
        self._check(
            self._run("pg_ctl", "-D", self.data_dir, "-l", self.log, "-w", "-t", "60", "start"),
            "pg_ctl start",
        )
        self._running = True

    def stop(self) -> None:
        if self._running:
            self._running = False
            self._run("pg_ctl", "-D", self.data_dir, "-m", "fast", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def start_server() -> tuple[PostgresServer, _Cluster]:
    """Starts a new cluster with the test role and database; the caller stops it."""
    bin_dir = server_bin_dir()
    if bin_dir is None:
        with apt.installing():  # another worker process may be installing it right now
            bin_dir = server_bin_dir() or install_postgres()
    cluster = _Cluster(bin_dir)
    superuser_password = secrets.token_hex(16)
    try:
        cluster.init(superuser_password)
        for attempt in range(_START_ATTEMPTS):
            port = _free_port()
            try:
                cluster.start(port)
                break
            except RuntimeError:  # the port was taken between probing and binding: try another
                if attempt == _START_ATTEMPTS - 1:
                    raise
        server = PostgresServer(
            host="127.0.0.1",
            port=port,
            database=DATABASE,
            user=ROLE,
            password=secrets.token_hex(16),
            superuser_password=superuser_password,
            data_dir=cluster.data_dir,
        )
        _create_role_and_database(server)
    except BaseException:
        cluster.stop()
        raise
    return server, cluster


def _create_role_and_database(server: PostgresServer) -> None:
    import pg8000.dbapi

    conn = pg8000.dbapi.connect(
        user=SYSTEM_USER,
        password=server.superuser_password,
        host=server.host,
        port=server.port,
        database="postgres",
    )
    conn.autocommit = True
    try:
        cursor = conn.cursor()
        # Utility statements take no parameters; the name and password are our own hex tokens.
        cursor.execute(f"CREATE ROLE {server.user} LOGIN PASSWORD '{server.password}'")
        cursor.execute(f"CREATE DATABASE {server.database} OWNER {server.user}")
    finally:
        conn.close()


_shared: dict[str, tuple[PostgresServer, _Cluster]] = {}


def _shared_server() -> PostgresServer:
    if "server" not in _shared:
        _shared["server"] = start_server()
        atexit.register(_stop_shared)  # also stops it when the session dies before teardown
    return _shared["server"][0]


def _stop_shared() -> None:
    entry = _shared.pop("server", None)
    if entry is not None:
        entry[1].stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server on 127.0.0.1 with an empty test database, for the whole session."""
    yield _shared_server()
    _stop_shared()
