"""Where a search's study lives, and the lock its workers schedule under.

Two kinds of storage:
- a SQLite file (the default, `SEARCH_DIR/study.db`): the workers of one machine; they schedule
  under an `fcntl` lock on `SEARCH_DIR/.schedule.lock`, a local file;
- a PostgreSQL server (`--storage=postgresql://USER:PASSWORD@HOST:PORT/DATABASE`): workers on any
  number of machines, which share nothing else (docs/search.md#several-machines). They schedule
  under a PostgreSQL advisory lock, held on a connection of its own and keyed by the study's
  name: the server serialises the decisions, and a worker that dies (even by kill -9) loses its
  connection and with it the lock. No correctness rests on a lock file in a shared folder.
The driver is psycopg 3 (`pip install 'bert-tf2[search]'`); a `postgresql://` URL is given to
SQLAlchemy as `postgresql+psycopg://`. A server that cannot be reached, or refuses the user, is
one line naming the host and what to check, before anything is written. Other databases are
refused in one line: only these two are tested.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import urllib.parse

from bert_tf2.process.errors import SettingsError

STUDY_FILE = "study.db"
LOCK_FILE = ".schedule.lock"
CONNECT_TIMEOUT_S = 10


def is_server(url: str | None) -> bool:
    return bool(url) and not url.startswith("sqlite")


def normalized(url: str) -> str:
    """The SQLAlchemy URL of `--storage`: `postgresql://` and `postgres://` use psycopg 3."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise SettingsError(f"--storage={url}: not a URL; postgresql://USER:PASSWORD@HOST:PORT/"
                            f"DATABASE (several machines) or sqlite:///PATH (one machine)")
    if scheme in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    if scheme == "sqlite" or scheme.startswith("postgresql+"):
        return url
    raise SettingsError(f"--storage={redacted(url)}: a {scheme} database is not supported; "
                        f"postgresql://USER:PASSWORD@HOST:PORT/DATABASE (several machines) or "
                        f"sqlite:///PATH (one machine)")


def redacted(url: str) -> str:
    """`url` with its password replaced by `***` (for messages and logs)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def where(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 5432}"


def server_engine(url: str):
    """A SQLAlchemy engine on the server, failing fast (`CONNECT_TIMEOUT_S`) when it is not
    there."""
    import sqlalchemy

    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise SettingsError(f"--storage={redacted(url)}: PostgreSQL needs the psycopg driver: "
                            f"pip install 'bert-tf2[search]'") from None
    return sqlalchemy.create_engine(normalized(url), poolclass=sqlalchemy.pool.NullPool,
                                    connect_args={"connect_timeout": CONNECT_TIMEOUT_S})


def connection_error(url: str, error: Exception) -> SettingsError:
    """A failed connection as one line: where, why (the server's own words), what to check."""
    text = str(getattr(error, "orig", None) or error).strip()
    reason = text.splitlines()[0] if text else type(error).__name__
    # psycopg: 'connection failed: connection to server at "HOST", port P failed: FATAL:  WHY'
    if "FATAL:" in reason:
        reason = reason.split("FATAL:")[-1].strip()
    elif " failed: " in reason:
        reason = reason.rsplit(" failed: ", 1)[-1].strip()
    refused_user = "password authentication failed" in reason or (
        "role" in reason and "does not exist" in reason)
    if refused_user:
        advice = "check the user and password in --storage"
    elif "database" in reason and "does not exist" in reason:
        advice = "create the database (createdb) or name an existing one in --storage"
    else:
        advice = ("check that the server runs there and accepts connections from this machine "
                  "(listen_addresses, pg_hba.conf, a firewall)")
    return SettingsError(f"--storage={redacted(url)}: cannot use the database at {where(url)} "
                         f"({reason}); {advice}")


class SchedulingLock:
    """One worker at a time makes a scheduling decision (see the module docstring)."""

    def __init__(self, url: str | None, search_dir: str, study_name: str):
        self.url = url
        self.search_dir = search_dir
        self.key = int.from_bytes(hashlib.sha256(f"bert-search:{study_name}".encode())
                                  .digest()[:8], "big", signed=True)
        self._connection = None
        if is_server(url):
            engine = server_engine(url)
            try:
                self._connection = engine.connect()
            except Exception as e:  # sqlalchemy's OperationalError and the like
                raise connection_error(url, e) from None

    @contextlib.contextmanager
    def held(self):
        if self._connection is None:
            os.makedirs(self.search_dir, exist_ok=True)
            with open(os.path.join(self.search_dir, LOCK_FILE), "a") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(f, fcntl.LOCK_UN)
            return
        import sqlalchemy

        self._connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"),
                                 {"key": self.key})
        self._connection.commit()
        try:
            yield
        finally:
            self._connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"),
                                     {"key": self.key})
            self._connection.commit()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
