"""A table's snapshot replayed from its log without delta-rs, and the checkpoints written from
it: held to what delta-rs reads and writes, across merges and deletes (entries delta-rs
wrote), compaction, checkpoints and log entries expired by another process."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_tdstream import Session, Warehouse
from dagster_tdstream.compute.spark import LazySpark
from dagster_tdstream.storage import delta
from dagster_tdstream.storage.maintenance import RETENTION_ENV
from dagster_tdstream.storage.snapshot import retention_ms

from .conftest import _NoSpark

T = 1_700_000_000_000


def _table(session: Session) -> Path:
    session.execute("create database d; use d; create stable m (ts timestamp, v int) tags (g int)")
    session.execute("create table c1 using m tags (1); create table c2 using m tags (2)")
    return Path(session.warehouse.delta.uri("d", "m"))


def _stored(uri: Path, version: int | None = None) -> dict[tuple[str, int], int]:
    rows = DeltaTable(str(uri), version=version).to_pyarrow_table(columns=["tbname", "ts", "v"]).to_pylist()
    return {(r["tbname"], r["ts"]): r["v"] for r in rows}


def _agrees_with_delta_rs(warehouse: Warehouse, uri: Path) -> None:
    snapshot = warehouse.delta.snapshot("d", "m")
    table = DeltaTable(str(uri))
    assert snapshot.version == table.version()
    assert set(snapshot.files) == {file.rsplit("/", 1)[-1] for file in table.file_uris()}
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert {a["path"]: a["size_bytes"] for a in actions} == {p: a["size"] for p, a in snapshot.files.items()}
    assert snapshot.metadata["schemaString"] == table.schema().to_json()


def _sorted_rows(path: Path) -> list[dict[str, object]]:
    def key(row: dict[str, object]) -> tuple[str, str]:
        kind = next(k for k, v in row.items() if v is not None)
        action = row[kind]
        return kind, str(action.get("path", "")) if isinstance(action, dict) else ""

    return sorted(pq.read_table(path).to_pylist(), key=key)


def test_a_checkpoint_written_here_equals_the_one_delta_rs_writes(
    sql_session: Session, warehouse: Warehouse, tmp_path: Path
) -> None:
    session = sql_session
    uri = _table(session)
    model: dict[tuple[str, int], int] = {}
    i = 0
    while warehouse.delta.latest_version("d", "m") < 105:  # compaction at 50 and 100, a checkpoint at 100
        session.execute(f"insert into c{1 + i % 2} values ({T + i}, {i})")
        model[(f"c{1 + i % 2}", T + i)] = i
        if i == 40:  # a merge and a delete: entries delta-rs writes, with removes
            session.execute(f"insert into c1 values ({T}, 1000)")
            session.execute(f"delete from m where ts = {T + 1}")
            model = {**model, ("c1", T): 1000}
            del model[("c2", T + 1)]
        i += 1
    ours = uri / "_delta_log" / f"{100:020}.checkpoint.parquet"
    assert ours.exists()

    copy = tmp_path / "copy"
    shutil.copytree(uri, copy)
    (copy / "_delta_log" / ours.name).unlink()
    (copy / "_delta_log" / "_last_checkpoint").unlink()
    DeltaTable(str(copy), version=100).create_checkpoint()
    theirs = copy / "_delta_log" / ours.name

    assert pq.read_schema(ours).equals(pq.read_schema(theirs))
    assert _sorted_rows(ours) == _sorted_rows(theirs)
    # delta-rs reads the table from it: the newest version and one just after the checkpoint
    _agrees_with_delta_rs(warehouse, uri)
    assert _stored(uri) == model
    assert _stored(uri, 101).items() <= model.items() and len(_stored(uri, 101)) < len(model)


_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(1, 2), st.lists(st.integers(0, 40), min_size=1, max_size=4)),
        st.tuples(st.just("delete"), st.integers(0, 40)),
        st.tuples(st.just("compact")),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=_OPERATIONS)
def test_the_replayed_snapshot_is_delta_rs_s_after_any_writes(
    tmp_path_factory: pytest.TempPathFactory, operations: list[tuple]
) -> None:
    warehouse = Warehouse(str(tmp_path_factory.mktemp("wh")))
    session = Session(warehouse, timezone="UTC", spark=LazySpark(session=_NoSpark()))
    model: dict[tuple[str, int], int] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(delta, "CHECKPOINT_INTERVAL", 3)  # a checkpoint every third version
        uri = _table(session)
        for n, operation in enumerate(operations):
            if operation[0] == "insert":
                _, child, keys = operation
                values = " ".join(f"({T + k}, {n})" for k in keys)
                session.execute(f"insert into c{child} values {values}")
                model |= {(f"c{child}", T + k): n for k in keys}
            elif operation[0] == "delete":
                session.execute(f"delete from m where ts <= {T + operation[1]}")
                model = {key: v for key, v in model.items() if key[1] > T + operation[1]}
            else:
                session.execute("compact database d")
            _agrees_with_delta_rs(warehouse, uri)
    assert _stored(uri) == model
    warehouse.close()


_WRITER = """
import sys
from dagster_tdstream import Session, Warehouse
session = Session(Warehouse(sys.argv[1]), database="d", timezone="UTC")
for i in range(120):
    session.execute(f"insert into c1 values ({int(sys.argv[2]) + i}, {i})")
print(session.execute("compact database d")[0].message)
"""


def test_a_snapshot_behind_entries_another_process_expired_is_read_from_the_checkpoint(
    sql_session: Session, warehouse: Warehouse
) -> None:
    session = sql_session
    uri = _table(session)
    session.execute(f"insert into c2 values ({T}, 7)")
    behind = warehouse.delta.snapshot("d", "m").version
    env = {**os.environ, RETENTION_ENV: "0"}  # entries may go as soon as no reader needs them
    done = subprocess.run(
        [sys.executable, "-c", _WRITER, warehouse.uri, str(T + 1)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    expired = re.search(r"(\d+) expired log entries removed", done.stdout)
    assert expired is not None and int(expired.group(1)) > 0, done.stdout
    assert not (uri / "_delta_log" / f"{behind + 1:020}.json").exists()
    _agrees_with_delta_rs(warehouse, uri)
    assert len(_stored(uri)) == 121


@pytest.mark.parametrize(
    ("setting", "ms"),
    [
        ("interval 1 minutes", 60_000),
        ("interval 2 hours", 7_200_000),
        ("INTERVAL 1 week", 604_800_000),
        (None, 604_800_000),
    ],
)
def test_removed_files_stay_in_checkpoints_for_the_table_s_retention(setting: str | None, ms: int) -> None:
    configuration = {} if setting is None else {"delta.deletedFileRetentionDuration": setting}
    assert retention_ms({"configuration": configuration}) == ms


_SNAPSHOT = """
import json, sys
from dagster_tdstream import Warehouse
snapshot = Warehouse(sys.argv[1]).delta.snapshot("d", "m")
print(json.dumps({"version": snapshot.version, "files": sorted(snapshot.files)}))
"""


def test_a_multi_part_checkpoint_is_read_whole(sql_session: Session, warehouse: Warehouse) -> None:
    uri = _table(sql_session)
    for i in range(110):
        sql_session.execute(f"insert into c{1 + i % 2} values ({T + i}, {i})")
    log = uri / "_delta_log"
    single = log / f"{100:020}.checkpoint.parquet"
    rows = pq.read_table(single)
    half = rows.num_rows // 2
    for n, part in enumerate((rows.slice(0, half), rows.slice(half)), start=1):
        pq.write_table(part, log / f"{100:020}.checkpoint.{n:010}.{2:010}.parquet")
    single.unlink()
    (log / "_last_checkpoint").write_text(json.dumps({"version": 100, "size": rows.num_rows, "parts": 2}))
    table = DeltaTable(str(uri))  # delta-rs reads the parts as one checkpoint too
    done = subprocess.run(
        [sys.executable, "-c", _SNAPSHOT, warehouse.uri], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout) == {
        "version": table.version(),
        "files": sorted(file.rsplit("/", 1)[-1] for file in table.file_uris()),
    }


def test_a_checkpoint_missing_a_file_is_named_not_read_as_an_empty_table(
    sql_session: Session, warehouse: Warehouse
) -> None:
    uri = _table(sql_session)
    for i in range(105):
        sql_session.execute(f"insert into c{1 + i % 2} values ({T + i}, {i})")
    (uri / "_delta_log" / f"{100:020}.checkpoint.parquet").unlink()
    # a new process, with no snapshot of its own to advance (delta-rs refuses such a table too)
    done = subprocess.run([sys.executable, "-c", _SNAPSHOT, warehouse.uri], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "CatalogError" in done.stderr and "the checkpoint of version 100 that" in done.stderr
    assert "has 0 of its 1 file(s): the table's snapshot cannot be read" in done.stderr
