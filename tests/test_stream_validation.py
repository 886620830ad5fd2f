"""CREATE STREAM validation: the conformance corpus, rules without and with the catalog."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dagster_tdstream import Session, StreamValidationError, TDStreamError
from dagster_tdstream.cli.main import main
from dagster_tdstream.sql.parser import parse_statement
from dagster_tdstream.sql.validate import validate_create_stream
from dagster_tdstream.testing.conformance import SYNTAX_TEST_TABLES

from .conftest import CONFORMANCE

SETUP = SYNTAX_TEST_TABLES


def _lines(name: str) -> list[str]:
    return [line for line in (CONFORMANCE / name).read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("line", _lines("create_stream_statements.txt"))
def test_every_corpus_statement_is_accepted(line: str) -> None:
    stmt = parse_statement(line)
    validate_create_stream(stmt)


def test_every_invalid_corpus_statement_is_rejected_with_a_position(sql_session: Session) -> None:
    sql_session.execute(SETUP.read_text())
    for line in _lines("invalid_statements.txt"):
        with pytest.raises(TDStreamError) as info:
            sql_session.check(line)
        assert info.value.line == 1 and info.value.column is not None, line


def test_parse_command_reports_counts() -> None:
    runner = CliRunner()
    valid = runner.invoke(main, ["parse", str(CONFORMANCE / "create_stream_statements.txt")])
    assert valid.exit_code == 0, valid.output
    assert valid.output.strip().splitlines()[-1] == "88 passed, 0 failed"
    invalid = runner.invoke(
        main,
        ["parse", "--expect-invalid", "--setup", str(SETUP), str(CONFORMANCE / "invalid_statements.txt")],
    )
    assert invalid.exit_code == 0, invalid.output
    assert invalid.output.strip().splitlines()[-1] == "31 passed, 0 failed"
    assert "rejected: SESSION needs the primary key column col1" in invalid.output


def test_parse_command_fails_on_an_accepted_invalid_line(tmp_path: Path) -> None:
    path = tmp_path / "lines.sql"
    path.write_text("create stream s period(10s) into o as select _tlocaltime, count(*) from t\nselect bad bad bad\n")
    result = CliRunner().invoke(main, ["parse", "--expect-invalid", str(path)])
    assert result.exit_code == 1
    assert "FAIL line 1: accepted" in result.output
    assert "ok line 2, column 16: rejected: expected end of statement" in result.output
    assert result.output.strip().splitlines()[-1] == "1 passed, 1 failed"


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("period(5a) into o as select _tlocaltime, count(*) from t", "PERIOD 5a is out of range"),
        ("period(3651d) into o as select _tlocaltime, count(*) from t", "out of range"),
        ("period(10s, 20s) into o as select _tlocaltime, count(*) from t", "less than the period"),
        ("sliding(1u) from t into o as select _tcurrent_ts, count(*) from t", "unit 'u' is not allowed"),
        ("interval(10m) sliding(1s) from t into o as select _twstart, count(*) from %%trows", "at most 99"),
        ("interval(10s, 10s) sliding(5s) from t into o as select _twstart, count(*) from %%trows", "offset 10s"),
        ("session(ts, 1n) from t into o as select _twstart, count(*) from %%trows", "unit 'n'"),
        ("interval(1n) sliding(1n) from t into o as select _twstart, count(*) from %%trows", "unit 'n'"),
        ("interval(1y) sliding(1d) from t into o as select _twstart, count(*) from %%trows", "up to 365 overlapping"),
        ("interval(1y, 1n) sliding(1w) from t into o as select _twstart, count(*) from %%trows", "not months"),
        ("count_window(0) from t into o as select _twstart, count(*) from %%trows", "between 1 and"),
        (
            "state_window(c) from t stream_options(ignore_disorder|ignore_disorder) into o "
            "as select _twstart, count(*) from %%trows",
            "IGNORE_DISORDER given twice",
        ),
        ("state_window(c) into o as select _twstart, count(*) from t", "needs a trigger table"),
        (
            "state_window(c) from t output_subtable(concat('a', tbname)) into o as select _twstart, count(*) from t",
            "expected the next clause",
        ),
        ("state_window(c) from t into o output_subtable('x') as select _twstart from t", "needs PARTITION BY"),
        ("state_window(c) from t into t as select _twstart, count(*) from %%trows", "cannot be the trigger table"),
        ("period(10s) into o as select _twstart, count(*) from t", "only for window triggers"),
        ("state_window(c) from t into o as select _tcurrent_ts, count(*) from t", "only for SLIDING"),
        ("sliding(1s) from t into o as select _tprev_localtime, count(*) from t", "only for PERIOD"),
        (
            "state_window(c) from t stream_options(event_type(window_open)) into o "
            "as select _twstart, count(*) from %%trows",
            "%%trows needs WINDOW_CLOSE",
        ),
        ("state_window(c) from t into o as select count(*), _twstart from %%trows", "must be a timestamp"),
        (
            "interval(10s) sliding(10s) from t into o as select _twstart, count(*), _twstart, _twend from %%trows",
            "duplicate output column name '_twstart'",
        ),
        ("state_window(c) from t into o as select _twstart ts, count(*) n, _twend ts from %%trows", "name 'ts'"),
        (
            "state_window(c) from t notify('ws://h:1/x') on(window_close) where nope > 1 "
            "into o as select _twstart, count(*) c from %%trows",
            "not a result column",
        ),
        ("state_window(c) from t notify('ftp://h/x') on(window_close)", "ws://host:port"),
        ("state_window(c) from t notify('ws://h:1/x') on(on_time)", "ON_TIME is for PERIOD"),
        ("state_window(c) from t", "must NOTIFY"),
        (
            "state_window(c) from t stream_options(watermark(10s)|expired_time(10s)) "
            "into o as select _twstart, count(*) from %%trows",
            "greater than WATERMARK",
        ),
        (
            "state_window(c) from t stream_options(fill_history('2025-01-01T00:00:00Z')) "
            "into o as select _twstart, count(*) from %%trows",
            "invalid timestamp",
        ),
    ],
)
def test_rules_without_catalog(sql: str, message: str) -> None:
    with pytest.raises(TDStreamError) as info:
        validate_create_stream(parse_statement(f"create stream s {sql}"))
    assert message in str(info.value)


def test_calendar_intervals_are_accepted() -> None:
    for trigger in ("interval(1n) sliding(1d)", "interval(1y, 2h) sliding(4w)", "interval(3n) sliding(1d)"):
        stmt = parse_statement(f"create stream s {trigger} from t into o as select _twstart, count(*) from %%trows")
        validate_create_stream(stmt)


def test_notify_where_may_name_unaliased_result_columns() -> None:
    stmt = parse_statement(
        "create stream s state_window(c) from t notify('ws://127.0.0.1:1/x') on(window_close) "
        "where count(q_col1) > 3 and first(ts) > 0 into o as select first(ts), count(q_col1) from q"
    )
    validate_create_stream(stmt)


def test_catalog_rules(sql_session: Session) -> None:
    sql_session.execute(
        "create database d; use d;"
        "create stable st (ts timestamp, c int, f float, s varchar(8)) tags (g int, name varchar(8));"
        "create table ct using st tags (1, 'a'); create table nt (ts timestamp, c int);"
        "create table out_n (ts timestamp, n bigint);"
    )

    def rejected(sql: str) -> str:
        with pytest.raises(TDStreamError) as info:
            sql_session.check(f"create stream s {sql}")
        return str(info.value)

    assert "PARTITION BY f" in rejected(
        "interval(1s) sliding(1s) from st partition by f into o as select _twstart from st"
    )
    assert "needs PARTITION BY tbname" in rejected("count_window(3) from st into o as select _twstart from %%trows")
    assert "is FLOAT" in rejected("state_window(f) from ct into o as select _twstart from %%trows")
    assert "no column zz" in rejected(
        "event_window(start with zz > 1 end with c < 1) from nt into o as select _twstart from nt"
    )
    assert "no column s" in rejected("state_window(c) from nt into o as select _twstart, s from %%trows")
    assert "does not exist" in rejected("state_window(c) from nope into o as select _twstart from nt")
    assert "is a child table" in rejected("state_window(c) from nt into ct (ts, c) as select _twstart, c from nt")
    assert "does not match" in rejected(
        "state_window(c) from nt into out_n (ts, n) as select _twstart, avg(c) from %%trows"
    )
    assert "name its columns" in rejected("state_window(c) from nt into out_n as select _twstart, count(*) from nt")
    assert "needs string arguments" in rejected(
        "interval(1s) sliding(1s) from st partition by tbname, g into o output_subtable(concat(g, 'x')) "
        "as select _twstart, count(*) from %%trows"
    )
    # accepted: the same stream written correctly, and registered once
    ok = "state_window(c) from nt into out_n (ts, n) as select _twstart, count(*) from %%trows"
    sql_session.execute(f"create stream s {ok}")
    with pytest.raises(StreamValidationError, match="already exists"):
        sql_session.execute(f"create stream s {ok}")
    assert sql_session.execute(f"create stream if not exists s {ok}")[0].message == "OK (stream exists)"
    shown = sql_session.query("show streams").rows
    assert [(r[0], r[1], r[4]) for r in shown] == [("s", "d", "Running")]


def test_table_operations_a_stream_forbids(sql_session: Session) -> None:
    sql_session.execute(
        "create database src; create stable src.st (ts timestamp, v int) tags (g int, h int);"
        "create table src.a using src.st tags (1, 1); create database out;"
        "create stream out.s interval(10s) sliding(10s) from src.st partition by g into out.r "
        "as select _twstart, count(*) from %%trows"
    )
    with pytest.raises(StreamValidationError, match=r"line 1, column 1: tag g of src.a groups stream out.s"):
        sql_session.execute("alter table src.a set tag g = 2")
    assert sql_session.execute("alter table src.a set tag h = 2")[0].message == "Alter OK"
    assert sql_session.warehouse.table("src", "a").tag_values == {"g": 1, "h": 2}
    with pytest.raises(StreamValidationError, match=r"database src is read by stream out.s.*DROP DATABASE src FORCE"):
        sql_session.execute("drop database src")
    assert sql_session.warehouse.catalog.get_database("src") is not None  # rejected: nothing dropped
    assert sql_session.execute("drop database src force")[0].message == "Drop OK"


def test_conformance_checks_an_invalid_statement_file_against_the_syntax_tests_tables(tmp_path: Path) -> None:
    """``tdstream conformance`` over a corpus directory: lines TDengine rejects only by its
    catalog (a SESSION over a column that is not the primary key) count as rejected."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "invalid_statements.txt").write_text((CONFORMANCE / "invalid_statements.txt").read_text())
    result = CliRunner().invoke(main, ["conformance", str(corpus)])
    assert result.output.strip().splitlines()[-1] == "1 passed, 0 failed", result.output
    # a statement valid against those tables is reported as accepted, by its line
    valid = "create stream create_stream_db.ok session(col1, 10s) from create_stream_db.trigger_table "
    valid += "into create_stream_db.out_ok as select _twstart, count(*) from %%trows"
    (corpus / "invalid_statements.txt").write_text(
        "CREATE STREAM create_stream_db.inv2 SESSION(col2, 10s) FROM create_stream_db.trigger_table "
        "INTO create_stream_db.o AS SELECT _twstart, count(*) from %%trows;\n" + valid + "\n"
    )
    result = CliRunner().invoke(main, ["conformance", str(corpus)])
    assert result.exit_code == 1
    assert "FAIL statements:invalid_statements.txt" in result.output
    assert "1 of 2 line(s) accepted: lines 2" in result.output
