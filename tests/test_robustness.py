"""Bad input gets a TDStreamError with a position, never a raw exception, and a rejected
statement changes nothing (issue 19's reproductions, each a class of input)."""

from __future__ import annotations

import pytest

from dagster_tdstream import Session, Warehouse
from dagster_tdstream.errors import TDStreamError
from dagster_tdstream.sql.limits import MAX_EXPRESSION_DEPTH, MAX_NESTING
from dagster_tdstream.sql.parser import parse_statement
from dagster_tdstream.testing.fuzz import snapshot

from .test_storage import rows

SCHEMA = (
    "create database d; use d; create stable st (ts timestamp, v int, f float, x double) tags (g int);"
    "create table c1 using st tags (1); create table nt (ts timestamp, a int, b int);"
    "insert into c1 values (1000, 1, 1.5, 2.5) nt values (1000, 1, 1)"
)


@pytest.mark.parametrize(
    "statement",
    [
        "insert into c1 values (2000, 1e309, 1, 1)",  # an INT beyond any double
        "insert into c1 values (2000, 1, 3.5e38, 1)",  # a FLOAT beyond float32
        "insert into c1 values (2000, 1, 1, 1e309)",  # DOUBLE infinity
        "insert into c1 values (2000, 1, 'nan', 1)",
        "insert into c1 values (99999999999999999999, 1, 1, 1)",  # a timestamp beyond 64 bits
        "insert into c1 values (now - 1e20, 1, 1, 1)",
        "create table c2 using st tags (1e309)",
        "insert into c3 using st tags (99999999999) values (2000, 1, 1, 1)",
        "alter table c1 set tag g = 1e309",
        # a later table's value rejects the whole statement: c1's row is not written either
        "insert into c1 values (5000, 5, 5, 5) nt values (99999999999999999999, 1, 1)",
        "insert into c1 values (5000, 5, 5, 5) nt values (5000, 1e309, 1)",
    ],
)
def test_out_of_range_values_are_rejected_and_change_nothing(
    sql_session: Session, warehouse: Warehouse, statement: str
) -> None:
    sql_session.execute(SCHEMA)
    before = snapshot(warehouse)
    with pytest.raises(TDStreamError, match=r"out of range for column \w+ \((INT|FLOAT|DOUBLE|TIMESTAMP)\)") as error:
        sql_session.execute(statement)
    assert error.value.line == 1 and error.value.column is not None
    assert snapshot(warehouse) == before


@pytest.mark.parametrize(
    ("condition", "deleted"),
    [
        ("v = 99999999999", 0),  # beyond INT: matches nothing rather than failing to cast
        ("v = 1e309", 0),
        ("v <> 99999999999", 1),
        ("v < 99999999999", 1),
        ("v > -99999999999", 1),
        ("v >= 99999999999", 0),
        ("99999999999 > v", 1),
        ("v in (1, 99999999999)", 1),
        ("v not in (99999999999)", 1),
        ("v between -1e309 and 1e309", 1),
        ("v not between 0 and 99999999999", 0),
        ("ts < 99999999999999999999", 1),
        ("v in (1, '1')", 1),  # a number written as a string
    ],
)
def test_delete_with_a_value_beyond_the_column_type(
    sql_session: Session, warehouse: Warehouse, condition: str, deleted: int
) -> None:
    sql_session.execute(SCHEMA)
    (result,) = sql_session.execute(f"delete from c1 where {condition}")
    assert result.affected == deleted
    assert len(rows(warehouse, "st")) == 1 - deleted


def test_delete_comparing_a_number_column_with_text_is_rejected(sql_session: Session, warehouse: Warehouse) -> None:
    sql_session.execute(SCHEMA)
    with pytest.raises(TDStreamError, match=r"column a \(INT\) compares with numbers, not 'x'") as error:
        sql_session.execute("delete from nt where a in (1, 'x')")
    assert (error.value.line, error.value.column) == (1, 31)
    assert len(rows(warehouse, "nt")) == 1


@pytest.mark.parametrize("value", ["1.5", "'abc'", "-1", "0", "1025"])
def test_database_options_are_checked_at_create(sql_session: Session, value: str) -> None:
    with pytest.raises(TDStreamError, match=r"VGROUPS; expected an integer from 1 to 1024") as error:
        sql_session.execute(f"create database d4 vgroups {value}")
    assert (error.value.line, error.value.column) == (1, 28)
    sql_session.execute("create database d5 vgroups 4 replica 1 buffer 256")
    (shown,) = sql_session.execute("show databases")
    assert next(row[2] for row in shown.rows if row[0] == "d5") == 4


def test_a_bad_stored_option_does_not_break_the_system_views(sql_session: Session, warehouse: Warehouse) -> None:
    # a catalog written before options were checked
    warehouse.create_database("old", "ms", {"VGROUPS": "1.5", "PRECISION": "ms"}, if_not_exists=False)
    sql_session.execute("create database d vgroups 2")
    (result,) = sql_session.execute("show databases")
    shown = {row[0]: row[2] for row in result.rows}
    assert shown["old"] is None and shown["d"] == 2
    assert sql_session.execute("show databases")[0].table is not None


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("select " + "(" * 100 + "1" + ")" * 100, f"nested more than {MAX_NESTING} levels"),
        ("select " + "- " * 1000 + "1", f"nested more than {MAX_NESTING} levels"),
        ("select * from t where " + "not " * 1000 + "v", f"nested more than {MAX_NESTING} levels"),
        ("select " + "abs(" * 200 + "1" + ")" * 200, f"nested more than {MAX_NESTING} levels"),
        ("select " + " + ".join(["v"] * 1000) + " from t", f"more than {MAX_EXPRESSION_DEPTH} levels deep"),
        ("insert into t values (1000, " + "+".join(["1"] * 2000) + ")", f"more than {MAX_EXPRESSION_DEPTH} levels"),
    ],
)
def test_deep_expressions_are_refused_with_the_limit(statement: str, message: str) -> None:
    with pytest.raises(TDStreamError, match=message) as error:
        parse_statement(statement)
    assert error.value.line == 1 and error.value.column is not None


def test_expressions_within_the_limits_parse_and_write(sql_session: Session, warehouse: Warehouse) -> None:
    sql_session.execute(SCHEMA)
    chain = "+".join(["1"] * (MAX_EXPRESSION_DEPTH - 1))
    nested = "(" * (MAX_NESTING - 2) + "2" + ")" * (MAX_NESTING - 2)
    sql_session.execute(f"insert into nt values (2000, {chain}, {nested})")
    assert rows(warehouse, "nt")[-1] == {"ts": 2000, "a": MAX_EXPRESSION_DEPTH - 1, "b": 2}


@pytest.mark.parametrize("duration", ["1e-10", "1e10", "1.5", "2.5s"])
def test_durations_are_an_integer_and_a_unit(duration: str) -> None:
    with pytest.raises(TDStreamError, match=r"integer and a unit|fractional duration") as error:
        parse_statement(
            f"create stream s interval({duration}) sliding(1s) from st into o as select _twstart, count(*) from %%trows"
        )
    assert (error.value.line, error.value.column) == (1, 26)


def test_a_state_window_over_a_constant_or_an_expression_it_cannot_compute_is_refused(
    sql_session: Session, warehouse: Warehouse
) -> None:
    sql_session.execute(SCHEMA)
    tail = "from c1 into o as select _twstart, count(*) from %%trows"
    with pytest.raises(
        TDStreamError, match="STATE_WINDOW needs a column of the trigger table, not a constant"
    ) as error:
        sql_session.execute(f"create stream s state_window(now - 1e20) {tail}")
    assert (error.value.line, error.value.column) == (1, 34)  # the expression's operator
    # a function the trigger task cannot compute on a row: refused where it is
    with pytest.raises(TDStreamError, match=r"STATE_WINDOW over sqrt\(v\): sqrt\(\) is not supported here") as error:
        sql_session.execute(f"create stream s state_window(sqrt(v)) {tail}")
    assert (error.value.line, error.value.column) == (1, 30)
    # a state is an integer, BOOL or string value
    with pytest.raises(TDStreamError, match=r"STATE_WINDOW over \(v/2\) gives a float value") as error:
        sql_session.execute(f"create stream s state_window(v / 2) {tail}")
    assert (error.value.line, error.value.column) == (1, 32)
    assert warehouse.catalog.list_streams() == [] and warehouse.find_table("d", "o") is None
    sql_session.execute(f"create stream s state_window(case when v > 0 then 'up' else 'down' end) {tail}")
    assert [s.key for s in warehouse.catalog.list_streams()] == ["d.s"]
