"""Streams on one trigger table share one read of its rows in a round of the live worker: the
results are those of each stream reading its own rows, and a stream far behind reads alone."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from dagster_tdstream import Session, StreamHarness
from dagster_tdstream.compute.run import compute_triggers, rows_span
from dagster_tdstream.compute.shared_rows import share_rows
from dagster_tdstream.storage.registry import load_stream

from .conftest import output

T = 1_700_000_000_000
STREAMS = (
    "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
    "create table c1 using st tags (1); create table c2 using st tags (2);"
    "create stream s1 interval(10s) sliding(10s) from st partition by tbname into o1 "
    "as select _twstart, sum(v) s, count(*) n from %%trows;"
    "create stream s2 interval(20s) sliding(20s) from st into o2 as select _twstart, max(v) m from %%trows;"
    "create stream s3 interval(10s) sliding(10s) from st partition by g into o3 "
    "as select _twstart, first(v) f from %%trows;"
)


def test_streams_on_one_table_share_a_read_and_compute_what_they_would_alone(
    session: Session, harness: StreamHarness
) -> None:
    session.execute(STREAMS)
    rows = [(T, 1, 1), (T + 5000, 2, 2), (T + 12000, 3, 1), (T + 25000, 4, 2), (T + 31000, 5, 1), (T + 45000, 6, 2)]
    session.execute("insert into " + " ".join(f"d.c{g} values ({ts}, {v})" for ts, v, g in rows))
    harness.tick()  # the sensors queue the fired windows; nothing computes them yet
    warehouse = harness.warehouse
    streams = [load_stream(warehouse, f"d.s{i}") for i in (1, 2, 3)]
    pending = {s.key: warehouse.catalog.pending_triggers(s.key) for s in streams}
    # s3's batch holds only its oldest window
    pending["d.s3"] = [t for t in pending["d.s3"] if t["wstart"] == T]
    spans = {s.key: rows_span(s, pending[s.key]) for s in streams}
    assert spans == {"d.s1": (T, T + 40000), "d.s2": (T, T + 40000), "d.s3": (T, T + 10000)}
    shared = share_rows(
        harness.resources["tdstream_spark"].spark_session,
        warehouse,
        [(s.key, s.trigger_table, spans[s.key]) for s in streams],  # type: ignore[misc]
    )
    # s1 and s2 cover the same 40 s and s3's window lies inside them: one read for the three
    assert shared["d.s1"] is shared["d.s2"] is shared["d.s3"]
    assert (shared["d.s1"].low, shared["d.s1"].high) == (T, T + 40000)
    spark = harness.resources["tdstream_spark"].spark_session
    try:
        for stream in streams:
            compute_triggers(
                spark, warehouse, stream, pending[stream.key], timezone=ZoneInfo("UTC"), shared=shared[stream.key]
            )
    finally:
        shared["d.s1"].release()
    # each child table's windows up to its own last row; empty ones fire too (count 0)
    assert output(session, "select _twstart, s, n, tag_tbname from d.o1 order by tag_tbname, _twstart") == [
        (T, 1, 1, "c1"), (T + 10000, 3, 1, "c1"), (T + 20000, None, 0, "c1"),
        (T, 2, 1, "c2"), (T + 10000, None, 0, "c2"), (T + 20000, 4, 1, "c2"), (T + 30000, None, 0, "c2"),
    ]  # fmt: skip
    assert output(session, "select _twstart, m from d.o2 order by _twstart") == [(T, 3), (T + 20000, 5)]
    assert output(session, "select _twstart, f from d.o3 order by _twstart, f") == [(T, 1), (T, 2)]


def test_a_stream_far_behind_reads_its_own_rows() -> None:
    from dagster_tdstream.compute.shared_rows import _clusters
    from dagster_tdstream.storage.catalog import TableInfo

    table = TableInfo(db="d", name="st", kind="super", uid=1, created_at=0, columns=(), tags=())
    other = TableInfo(db="d", name="t2", kind="normal", uid=2, created_at=0, columns=(), tags=())
    recent = [("a", table, (10000, 11000)), ("b", table, (10500, 11400)), ("c", table, (10900, 11600))]
    behind = ("late", table, (0, 100))
    clusters = _clusters(sorted([*recent, behind], key=lambda b: b[2]))
    assert [[key for key, _, _ in cluster] for cluster in clusters] == [["late"], ["a", "b", "c"]]
    # other tables are never shared with, and a batch alone gets no cached read
    assert sorted(share_rows(None, None, [("x", other, (10000, 11000)), behind])) == []  # type: ignore[arg-type]
