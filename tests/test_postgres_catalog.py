"""The catalog on a real PostgreSQL server (Debian's postgresql package), started on 127.0.0.1
for this test and stopped after it."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy
from click.testing import CliRunner

from dagster_tdstream import Session, Warehouse
from dagster_tdstream.cli.main import main
from dagster_tdstream.compute.spark import LazySpark


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL server binaries not installed (Debian package 'postgresql')")
    # PostgreSQL refuses to run as root: run it as the 'postgres' system user when we are root
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL")
        prefix = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="tdstream-pg-"))
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    if prefix:
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")
    port = _free_port()
    subprocess.run([*prefix, initdb, "-D", str(data), "-A", "trust", "-U", "postgres"], check=True, capture_output=True)
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1"
    subprocess.run(
        [*prefix, pg_ctl, "-D", str(data), "-o", options, "-w", "-t", "60", "-l", str(root / "log"), "start"],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def test_catalog_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    warehouse = Warehouse(str(tmp_path / "wh"), metadata_url=postgres_url)
    session = Session(warehouse, timezone="UTC", spark=LazySpark(session=object()))
    session.execute(
        "create database d precision 'us'; use d;"
        "create stable st (ts timestamp, v int) tags (g int);"
        "insert into c1 using st tags (7) values (1, 1) (2, 2); insert into c1 values (2, 20);"
        "alter table c1 set tag g = 8;"
        "create stream s state_window(v) from c1 into o as select _twstart, count(*) from %%trows"
    )
    # a second process sees the same catalog
    other = Warehouse(str(tmp_path / "wh"), metadata_url=postgres_url)
    assert other.database("d").precision == "us"
    assert other.table("d", "c1").tag_values == {"g": 8}
    assert sorted(other.read_table(other.table("d", "st")).to_pylist(), key=lambda r: r["ts"]) == [
        {"tbname": "c1", "ts": 1, "v": 1, "g": 8},
        {"tbname": "c1", "ts": 2, "v": 20, "g": 8},
    ]
    assert [s.name for s in other.catalog.list_streams("d")] == ["s"]
    with sqlalchemy.create_engine(postgres_url).connect() as conn:
        names = {row[0] for row in conn.execute(sqlalchemy.text("select tablename from pg_tables"))}
    assert {"tds_databases", "tds_tables", "tds_streams", "tds_write_state"} <= names
    warehouse.close()
    other.close()


_CLIENT = """
import sys
from dagster_tdstream import Session, Warehouse
session = Session(Warehouse(sys.argv[1], metadata_url=sys.argv[2]), database="w", timezone="UTC")
for statement in sys.argv[3:]:
    session.execute(statement)
"""


def test_the_writer_commits_inserts_with_its_catalog_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    # the writer records each group's commit in the catalog: on PostgreSQL through SQLAlchemy,
    # not the plain SQLite connection; a client finds the writer of its own catalog only.
    # (Database w: the server is the module's, and the first test made d.)
    root = str(tmp_path / "wh")
    Session(Warehouse(root, metadata_url=postgres_url), timezone="UTC").execute(
        "create database w; use w; create stable st (ts timestamp, v int) tags (g int);"
        "create table c1 using st tags (1); create table c2 using st tags (2)"
    )
    located = ["--warehouse", root, "--metadata-url", postgres_url]
    started = CliRunner().invoke(main, ["writer", "start", *located, "--idle-seconds", "120"])
    assert started.exit_code == 0, started.output
    try:

        def client(number: int) -> subprocess.Popen[bytes]:
            statements = [f"insert into c{number} values ({1000 * i}, {10 * number + i})" for i in range(1, 6)]
            return subprocess.Popen([sys.executable, "-c", _CLIENT, root, postgres_url, *statements])

        clients = [client(1), client(2)]
        assert [client.wait(timeout=120) for client in clients] == [0, 0]
        status = CliRunner().invoke(main, ["writer", "status", *located])
        assert status.exit_code == 0, status.output
        assert "10 writes (10 sent as SQL)" in status.output
        # written once each, and the catalog's marks account for the writer's last commit
        reader = Warehouse(root, metadata_url=postgres_url)
        rows = sorted((r["tbname"], r["ts"], r["v"]) for r in reader.read_table(reader.table("w", "st")).to_pylist())
        assert rows == [(f"c{c}", 1000 * i, 10 * c + i) for c in (1, 2) for i in range(1, 6)]
        version, marks = reader.trusted_watermarks(reader.table("w", "st")) or (None, {})
        assert version == reader.delta.version("w", "st")
        assert marks == {"c1": 5000, "c2": 5000}
        reader.close()
    finally:
        stopped = CliRunner().invoke(main, ["writer", "stop", *located])
    assert stopped.exit_code == 0, stopped.output
    assert "stopped the writer" in stopped.output
