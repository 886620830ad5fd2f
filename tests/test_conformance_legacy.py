"""TDengine's legacy (3.0-3.3.6) stream scenarios and invalid legacy statements
(tests/conformance/legacy_stream), through the conformance runner: each scenario's statements
in order on a fresh warehouse, the streams driven to idle after each phase, its checks after."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from dagster_tdstream.sql import ast
from dagster_tdstream.testing.benchmark_data import Schema, benchmark_statements
from dagster_tdstream.testing.conformance import run_case, run_statements_with_setup
from dagster_tdstream.testing.conformance import run_statement_file as run_statements
from dagster_tdstream.testing.datagen import GeneratorError
from dagster_tdstream.testing.notification_log import NotificationFormatError, closed_windows, stream_events

from .test_conformance import CORPORA, corpus_tests

test_legacy_scenario, test_legacy_statement_file = corpus_tests("legacy_stream")


def test_legacy_statements_tdengine_accepts_are_accepted() -> None:
    """Every CREATE STREAM of TDengine's legacy tests parses and passes the rules."""
    result = run_statements(CORPORA / "legacy_stream" / "legacy_create_stream_statements.txt", expect_valid=True)
    assert result.passed, result.reason


def test_setup_statements_naming_what_the_block_never_makes_are_passed_over(tmp_path: Path, spark: object) -> None:
    """A mechanically derived setup block may name a database made earlier in its tsim script,
    or keep a ``$variable``: TDengine rejects those and runs on, so does the runner (naming
    them); any other rejected setup statement leaves the line unbuilt, a failure."""
    (tmp_path / "x_invalid_setup.sql").write_text(
        "-- [block: elsewhere]\ncreate database d;\nuse d;\ncreate stable st (ts timestamp, a int) tags (t int);\n"
        "create stable other.out (ts timestamp, n bigint) tags (t int);\ncreate database $db;\n"
        "-- [block: refused]\ncreate database d;\nuse d;\ncreate stable st (ts timestamp, a int) tags t int;\n"
    )
    (tmp_path / "x_invalid_statements_sources.tsv").write_text("line\tsetup_block\n1\telsewhere\n2\trefused\n")
    statements = tmp_path / "x_invalid_statements.txt"
    statements.write_text("create stream s into other.out as select _wstart, count(*) from st interval(10s);\n")
    result = run_statements_with_setup(statements, tmp_path / "x_invalid_setup.sql", expect_valid=False, spark=spark)
    assert result.passed and result.reason == (
        "1 line(s) whose setup names what it never makes: lines 1 (block elsewhere: create stable other.out "
        "(ts timestamp, n bigint) tags (t int); → database other does not exist …)"
    )
    statements.write_text(statements.read_text() * 2)  # line 2: its block's stable is refused
    result = run_statements_with_setup(statements, tmp_path / "x_invalid_setup.sql", expect_valid=False, spark=spark)
    assert not result.passed and "1 line(s) whose setup block failed: lines 2 (block refused:" in result.reason


NOTIFY_CASE = CORPORA / "legacy_stream" / "cases" / "notify_max_delay_window_close_events_match_result_table.json"


def _smaller(case: dict[str, Any], tables: int, rows: int) -> dict[str, Any]:
    """The scenario on less data: its taosBenchmark description with fewer tables and rows."""
    generator = dict(case["data_generator"])
    generator["ddl"] = [re.sub(r"\d+ child tables ct0..ct\d+", f"{tables} child tables ct0..ct{tables - 1}", line) for line in generator["ddl"]]  # fmt: skip
    generator["rows"] = [re.sub(r"\d+ rows per child table", f"{rows} rows per child table", line) for line in generator["rows"]]  # fmt: skip
    return {**case, "data_generator": generator}


def test_a_taosbenchmark_run_feeds_streams_whose_notifications_match_their_results(spark: object) -> None:
    """TDengine's notify test on less data: the runner generates the data its prose describes,
    starts the WebSocket logger the statements' {port} names, and compares the windows each
    stream's events closed with its result table, every message held to the format."""
    case = _smaller(json.loads(NOTIFY_CASE.read_text()), tables=2, rows=240)
    result = run_case(case, spark=spark)
    assert result.passed, result.reason
    # the comparison can fail: results that leave out windows the notifications closed
    check = case["expected"][0]
    wrong = {**check, "equals_query": check["equals_query"].replace("order by tbname, wstart", "order by tbname, wstart limit 3")}  # fmt: skip
    result = run_case({**case, "stream_sql": case["stream_sql"][:1], "expected": [wrong]}, spark=spark)
    assert not result.passed and "closed window(s) notified" in result.reason, result.reason


def test_taosbenchmark_descriptions_give_the_tables_rows_and_times_they_describe() -> None:
    generator = {
        "name": "taosBenchmark -f stream_notify.json",
        "ddl": [
            "database test exists (drop no); super table st exists;"
            " 3 child tables d1..d3 auto-created, tag groupid random INT in [1,100]"
        ],
        "rows": [
            "7 rows per child table, random values for c0..c1 (types as in the table),"
            " start 2025-01-13 17:30:00.000, timestamp_step 500 ms, interlace_rows 3"
        ],
    }
    columns = (
        ast.ColumnDef("ts", ast.DataType("TIMESTAMP")),
        ast.ColumnDef("c0", ast.DataType("BOOL")),
        ast.ColumnDef("c1", ast.DataType("VARCHAR", 4)),
        ast.ColumnDef("c2", ast.DataType("INT")),
    )
    schema = Schema(columns, (ast.ColumnDef("groupid", ast.DataType("INT")),), "ms")
    asked: list[tuple[str, str]] = []

    def schema_of(db: str, stable: str) -> Schema:
        asked.append((db, stable))
        return schema

    statements = benchmark_statements(generator, schema_of, "Asia/Shanghai")
    assert asked == [("test", "st")]
    creates, inserts = statements[:3], statements[3:]
    assert [c.split(" using ")[0] for c in creates] == [f"create table if not exists test.d{i}" for i in (1, 2, 3)]
    assert all(1 <= int(re.search(r"tags \((\d+)\)", c).group(1)) <= 100 for c in creates)  # type: ignore[union-attr]
    assert len(inserts) == 3  # interlace rounds of 3, 3 and 1 rows per table
    rows = re.findall(r"\((\d+), (true|false), '([A-Za-z]{1,4})', NULL\)", " ".join(inserts))
    assert len(rows) == 21
    start = 1736760600000  # 2025-01-13 17:30:00 in Shanghai (UTC+8)
    assert sorted({int(r[0]) for r in rows}) == [start + 500 * j for j in range(7)]
    assert inserts[0].count("test.d1 values") == 1 and inserts[0].count("(") == 9
    assert benchmark_statements(generator, schema_of, "Asia/Shanghai") == statements  # seeded: a run repeats
    # the disorder file: some rows come up to disorder_range ms early
    disordered = {
        **generator,
        "name": "taosBenchmark -f stream_notify_disorder.json",
        "rows": [generator["rows"][0] + ", disorder_range 100"],
    }
    times = [int(t) for t in re.findall(r"\((\d+),", " ".join(benchmark_statements(disordered, schema_of, "Asia/Shanghai")))]  # fmt: skip
    off_step = [t for t in times if (t - start) % 500]
    assert off_step and all(0 < (-(t - start)) % 500 < 100 for t in off_step)
    with pytest.raises(GeneratorError, match="rows per child table"):
        benchmark_statements({**generator, "rows": ["some rows"]}, schema_of, None)


def _message(message_id: str, *events: dict[str, Any]) -> str:
    return json.dumps(
        {"messageId": message_id, "timestamp": 1, "streams": [{"streamName": "s", "events": list(events)}]}
    )


def test_notification_messages_are_held_to_tdengines_format() -> None:
    close = {
        "tableName": "t", "eventType": "WINDOW_CLOSE", "eventTime": 1, "windowId": "7", "windowType": "Time",
        "windowStart": 0, "windowEnd": 10, "result": {},
    }  # fmt: skip
    invalid = {**close, "eventType": "WINDOW_INVALIDATION"}
    reopened = {**close, "windowStart": 20, "windowEnd": 30, "windowId": "8"}
    events = stream_events([_message("a", close, reopened), _message("b", invalid)], "s", ["'window_close'"])
    assert closed_windows(events) == [(20, 30, "t")]  # the invalidated window is taken back
    with pytest.raises(NotificationFormatError, match="not unique"):
        stream_events([_message("a", close), _message("a", close)], "s", ["window_close"])
    # a stream with the logger's address twice receives each message twice, the same
    assert len(stream_events([_message("a", close), _message("a", close)], "s", ["window_close"], copies=2)) == 1
    with pytest.raises(NotificationFormatError, match="not unique"):
        stream_events([_message("a", close), _message("a", reopened)], "s", ["window_close"], copies=2)
    opened = {**close, "eventType": "WINDOW_OPEN"}
    with pytest.raises(NotificationFormatError, match="did not subscribe"):
        stream_events([_message("a", opened)], "s", ["window_close"])
    with pytest.raises(NotificationFormatError, match="lacks triggerCondition"):
        stream_events([_message("a", {**close, "windowType": "Event"})], "s", ["window_close"])


def test_a_taosbenchmark_run_no_data_line_names_follows_the_setup(spark: object) -> None:
    """Without a data line standing for it, the described run writes into the setup's tables
    right after the setup (before the streams, which see it as history)."""
    case = {
        "id": "benchmark_after_setup",
        "timezone": "UTC",
        "setup_sql": ["create database test;", "use test;", "create stable st (ts timestamp, v int) tags (g int);"],
        "data_generator": {
            "name": "taosBenchmark -f rows.json",
            "ddl": ["database test exists; super table st exists; 2 child tables d0..d1 auto-created"],
            "rows": ["20 rows per child table, start 2025-01-01 00:00:00.000, timestamp_step 1 s"],
        },
        "stream_sql": [
            "create stream s fill_history 1 into test.out as select _wstart, count(*) c from test.st interval(10s);"
        ],
        "expected": [
            {"after_phase": "setup", "query": "select count(*) from test.st", "row_count": 1, "cells": [[0, 0, 40]]},
            # 2 tables x 20 rows, 1 s apart: the first 10 s window closed, the second still open
            {"after_phase": "setup", "query": "select c from test.out", "row_count": 1, "cells": [[0, 0, 20]]},
        ],
    }
    result = run_case(case, spark=spark)
    assert result.passed, result.reason


def test_a_window_open_only_stream_is_checked_for_format_on_every_address(spark: object) -> None:
    """TDengine's notify test with window_open only and three addresses (a logger each): here
    one logger takes every {portN}; without equals_query the check is the messages' format."""
    case = {
        "id": "open_only_three_addresses",
        "timezone": "UTC",
        "setup_sql": [
            "create database test;",
            "use test;",
            "create stable st (ts timestamp, v int) tags (g int);",
            "create table c1 using st tags (1);",
        ],
        "stream_sql": [
            "create stream s trigger at_once into out as select _wstart, count(*) c from st partition by tbname"
            " interval(5s) notify ('ws://127.0.0.1:{port1}', 'ws://127.0.0.1:{port2}', 'ws://127.0.0.1:{port3}')"
            " on ('window_open');",
            "create stream quiet trigger at_once into out2 as select _wstart, count(*) c from st where v > 100"
            " partition by tbname interval(5s) notify ('ws://127.0.0.1:{port}') on ('window_open');",
        ],
        "data_sql": [{"phase": "insert", "sql": ["insert into c1 values (1735689600000, 1) (1735689606000, 2);"]}],
        "expected": [{"after_phase": "insert", "query": "notifications of stream s: well-formed, WINDOW_OPEN only"}],
    }
    result = run_case(case, spark=spark)
    assert result.passed, result.reason
    # a check on a stream that sent nothing fails rather than passing on no messages
    quiet = {**case, "expected": [{"after_phase": "insert", "query": "notifications of stream quiet: well-formed"}]}
    result = run_case(quiet, spark=spark)
    assert not result.passed and "sent no event" in result.reason, result.reason
