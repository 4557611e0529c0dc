"""A throwaway PostgreSQL server for the tests and benches of the search on a database: Debian's
`postgresql` package's binaries, a cluster in a fresh folder, listening on a free loopback port,
stopped and removed afterwards.

PostgreSQL refuses to run as root, so as root the server runs as the package's `postgres` user
(`runuser`); any other user runs it as itself. Local socket connections are trusted (the fixture
creates the role and database through them); TCP connections need the password, as a real
server's would, so that wrong credentials can be tried.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile

from conftest import free_port

USER, PASSWORD, DATABASE = "search", "secret-pw", "search"


def binaries() -> str | None:
    """The folder of initdb, pg_ctl and psql, or None when the server is not installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(os.path.realpath(initdb)) if initdb else None


def missing() -> str | None:
    """Why a cluster cannot be started here (None: it can)."""
    if binaries() is None:
        return "PostgreSQL's server (Debian's postgresql package: initdb, pg_ctl) is not installed"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no postgres user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root, and runuser (util-linux) is not installed"
    return None


class Cluster:
    """`with Cluster() as cluster: cluster.url()` (postgresql://search:...@127.0.0.1:PORT/search)."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="bert-postgres-")
        self.data = os.path.join(self.folder, "data")
        self.port = free_port()
        self.bin = binaries()
        self.as_user = []
        if os.geteuid() == 0:
            self.as_user = ["runuser", "-u", "postgres", "--"]
            entry = pwd.getpwnam("postgres")
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)

    def _run(self, *command, check=True):
        return subprocess.run([*self.as_user, os.path.join(self.bin, command[0]), *command[1:]],
                              capture_output=True, text=True, check=check, timeout=120)

    def sql(self, statement: str, database: str = "postgres"):
        return self._run("psql", "-h", self.folder, "-p", str(self.port), "-U", "admin",
                         "-d", database, "-v", "ON_ERROR_STOP=1", "-c", statement)

    def start(self) -> "Cluster":
        self._run("initdb", "-D", self.data, "-U", "admin", "--auth-local=trust",
                  "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync")
        self._run("pg_ctl", "-D", self.data, "-l", os.path.join(self.folder, "server.log"),
                  "-o", f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
                        f"-c fsync=off -c max_connections=50", "-w", "start")
        self.sql(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
        self.sql(f"CREATE DATABASE {DATABASE} OWNER {USER}")
        return self

    def url(self, user: str = USER, password: str = PASSWORD, database: str = DATABASE,
            port: int | None = None) -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{port or self.port}/{database}"

    def stop(self) -> None:
        self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
