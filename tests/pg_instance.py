"""A private, throw-away PostgreSQL server for tests that must stop and start their database.

The shared test server must never be stopped, so tests that simulate a database outage run
their own: ``initdb`` into a temporary directory, a free TCP port on 127.0.0.1 and the unix
socket inside that directory (so that nothing is shared with the system's server). The
directory is removed when the context manager exits, whatever happened.

``initdb`` and ``postgres`` refuse to run as root, so as root both run as the ``postgres``
user (``runuser``), in a directory that user owns.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import random
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: The lowest first port tried; the shared server listens on 5432.
FIRST_PORT = 5499
#: Ports tried before giving up.
PORT_ATTEMPTS = 50
#: Width of the range the first port is drawn from.
PORT_SPREAD = 5000
#: Seconds ``pg_ctl`` waits for a start or stop to complete.
PG_CTL_WAIT = 60


class PostgresUnavailable(RuntimeError):
    """The machine cannot run a private server (no binaries, no ``postgres`` user); tests skip,
    or fail under ``CI=true`` (``.ci/run`` installs the binaries)."""


def find_bin_dir() -> Path:
    """The directory holding ``initdb``/``pg_ctl``: ``ASYNCTASK_TEST_PG_BIN``, Debian's layout, or PATH."""
    override = os.environ.get("ASYNCTASK_TEST_PG_BIN")
    candidates = [override] if override else []
    # Debian/Ubuntu keep server binaries out of PATH, one directory per major version; newest first.
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True
    )
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for candidate in candidates:
        if (Path(candidate) / "initdb").is_file() and (Path(candidate) / "pg_ctl").is_file():
            return Path(candidate)
    raise PostgresUnavailable("no PostgreSQL server binaries (initdb, pg_ctl) found")


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As PostgreSQL binds: connections of a server stopped moments ago (TIME_WAIT) do not
        # make its port busy, a listening socket does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PrivatePostgres:
    """One server: ``start()``, ``stop()`` (immediate by default: a crash, as an outage is), ``url``."""

    def __init__(self, bin_dir: Path, root: Path, run_as: str | None) -> None:
        self.bin_dir = bin_dir
        self.root = root
        self.data = root / "data"
        self.log = root / "server.log"
        self.run_as = run_as
        self.port = 0

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the ``postgres`` database (trust authentication, no password)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *command: str) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", self.run_as, "--"] if self.run_as else []
        return subprocess.run(
            [*prefix, *command], capture_output=True, text=True, timeout=PG_CTL_WAIT + 30, check=False
        )

    def init(self) -> None:
        # --no-sync: the cluster is thrown away, so initdb need not wait for the disk.
        result = self._run(
            str(self.bin_dir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"
        )
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")

    def start(self) -> None:
        """Start on ``self.port`` (picking a free one the first time) and wait until it accepts."""
        if self.port:
            self._start_on(self.port)
            return
        errors = []
        # A random start: a server stopped for an outage keeps its port only if no other test
        # run on the machine starts one there meanwhile.
        first = FIRST_PORT + random.randrange(PORT_SPREAD)
        for port in range(first, first + PORT_ATTEMPTS):
            if not _port_is_free(port):
                continue
            try:
                self._start_on(port)
            except RuntimeError as exc:
                # Another process may have taken the port between the probe and the start.
                errors.append(str(exc))
                continue
            self.port = port
            return
        raise RuntimeError("could not start a private PostgreSQL:\n" + "\n".join(errors[-3:]))

    def _start_on(self, port: int) -> None:
        # fsync off: a test cluster need not survive a power cut; an immediate stop (what the
        # tests do) still recovers from the WAL in the OS cache.
        options = f"-p {port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        result = self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
            "-w",
            "-t",
            str(PG_CTL_WAIT),
            "start",
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"pg_ctl start on port {port} failed ({result.returncode}): {result.stderr.strip()}\n"
                f"{self.server_log()[-2000:]}"
            )

    def stop(self, mode: str = "immediate") -> None:
        result = self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.data),
            "-m",
            mode,
            "-w",
            "-t",
            str(PG_CTL_WAIT),
            "stop",
        )
        if result.returncode != 0:
            raise RuntimeError(f"pg_ctl stop failed ({result.returncode}): {result.stderr.strip()}")

    def is_running(self) -> bool:
        result = self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "status")
        return result.returncode == 0

    def server_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A started private server; stopped (immediately) and deleted on exit, even on failure.

    Raises ``PostgresUnavailable`` when this machine cannot run one.
    """
    bin_dir = find_bin_dir()
    run_as: str | None = None
    if os.geteuid() == 0:
        run_as = "postgres"
        try:
            owner = pwd.getpwnam(run_as)
        except KeyError:
            raise PostgresUnavailable(
                "running as root and there is no 'postgres' user to run initdb"
            ) from None
        if shutil.which("runuser") is None:
            raise PostgresUnavailable("running as root and runuser is missing")
    root = Path(tempfile.mkdtemp(prefix="asynctask-pg-"))
    try:
        if run_as is not None:
            os.chown(root, owner.pw_uid, owner.pw_gid)
        server = PrivatePostgres(bin_dir, root, run_as)
        server.init()
        server.start()
        try:
            yield server
        finally:
            if server.is_running():
                server.stop("immediate")
    finally:
        shutil.rmtree(root, ignore_errors=True)
