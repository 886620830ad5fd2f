"""The SQL front end: tokens with positions, the AST of every statement kind, syntax errors."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_tdstream import SqlSyntaxError, parse_script, parse_statement
from dagster_tdstream.sql import ast
from dagster_tdstream.sql.insert_row import one_row_insert
from dagster_tdstream.sql.parser import parse_statement_text
from dagster_tdstream.sql.timeunits import Duration
from dagster_tdstream.sql.tokens import Kind, split_statements, tokenize


def test_tokens_know_tdengine_literals_and_positions() -> None:
    tokens = tokenize("select a from %%trows\n where b >= now+10s and c = 'it''s' -- note\n and `x y` = 1.5e3")
    kinds = [(t.kind, t.text) for t in tokens]
    assert (Kind.PLACEHOLDER, "%%trows") in kinds
    assert (Kind.DURATION, "10s") in kinds
    assert (Kind.STRING, "'it''s'") in kinds
    assert (Kind.QUOTED_IDENT, "`x y`") in kinds
    assert (Kind.NUMBER, "1.5e3") in kinds
    where = next(t for t in tokens if t.text == "where")
    assert (where.line, where.column) == (2, 2)
    assert next(t for t in tokens if t.kind is Kind.STRING).string_value == "it's"
    assert all(t.text != "note" for t in tokens)


def test_hints_after_select_union_and_alter_local() -> None:
    query = parse_statement("select /*+ skip_tsma() para_tables_sort() */ avg(c1) from t /*+ not a hint */")
    assert isinstance(query, ast.Query) and query.select.hints == ("skip_tsma", "para_tables_sort")
    assert [t.kind for t in tokenize("select a /*+ skip_tsma() */ from t")].count(Kind.HINT) == 0
    union = parse_statement("select a from t union all select b from u union select c from v order by 1 desc limit 2")
    assert isinstance(union, ast.Query)
    assert [(all_, s.source.table.name) for all_, s in union.unions] == [(True, "u"), (False, "v")]  # type: ignore[union-attr]
    assert (union.limit, union.order_by[0].descending, union.unions[-1][1].limit) == (2, True, None)
    assert parse_statement("alter local 'querySmaOptimize' '1'") == ast.AlterLocal("querySmaOptimize", "1")
    assert parse_statement("ALTER LOCAL 'maxTsmaCalcDelay 900'") == ast.AlterLocal("maxTsmaCalcDelay", "900")
    with pytest.raises(SqlSyntaxError, match="the option's value") as caught:
        parse_statement("alter local 'querySmaOptimize'")
    assert caught.value.line == 1


def test_a_bulk_insert_reads_literal_values_as_the_expression_grammar_does() -> None:
    insert = parse_statement(
        "insert into t values (1, -2, 1.5, 'a''b', NULL, true, now + 1s, 1e3) (2, 3, 4, 'c', null, FALSE, 5, 6)"
    )
    assert isinstance(insert, ast.Insert)
    first, second = insert.targets[0].rows
    assert [type(v).__name__ for v in first] == ["Literal"] * 6 + ["Binary", "Literal"]
    assert [v.value for v in second if isinstance(v, ast.Literal)] == [2, 3, 4, "c", None, False, 5, 6]
    assert (first[1].value, first[2].value, first[3].value, first[7].value) == (-2, 1.5, "a'b", 1000.0)  # type: ignore[attr-defined]
    assert (first[3].pos.line, first[3].pos.column) == (1, 35)


def test_split_statements_ignores_semicolons_in_strings_and_empty_statements() -> None:
    parts = split_statements("insert into t values(now, 'a;b');;\nselect 1")
    assert [p.text for p in parts] == ["insert into t values(now, 'a;b')", "select 1"]
    assert (parts[1].line, parts[1].column) == (2, 1)


def test_ddl_statements() -> None:
    db = parse_statement("create database if not exists d1 precision 'us' vgroups 2 buffer 8 keep 365d,3650")
    assert isinstance(db, ast.CreateDatabase)
    assert (db.name, db.precision, db.if_not_exists) == ("d1", "us", True)
    assert db.keep == (Duration(365, "d"), Duration(3650, "d"))
    assert ("VGROUPS", "2") in db.options

    stable = parse_statement("create stable st (ts timestamp, v int unsigned, s varchar(16) comment 'x') tags (g int)")
    assert isinstance(stable, ast.CreateTable) and stable.is_super
    assert [c.type for c in stable.columns] == [
        ast.DataType("TIMESTAMP"),
        ast.DataType("INT UNSIGNED"),
        ast.DataType("VARCHAR", 16),
    ]
    assert stable.columns[2].comment == "x"

    children = parse_statement("create table c1 using st tags(1) if not exists c2 using st (g) tags(2)")
    assert isinstance(children, ast.CreateChildTables)
    assert [c.table.name for c in children.tables] == ["c1", "c2"]
    assert children.tables[1].tag_names == ("g",) and children.tables[1].if_not_exists

    drop = parse_statement("drop table if exists d.a, b")
    assert isinstance(drop, ast.DropTables)
    assert drop.tables == (ast.QualifiedName("a", "d"), ast.QualifiedName("b"))
    assert isinstance(parse_statement("drop database d1 force"), ast.DropDatabase)


def test_insert_with_using_column_list_and_several_tables() -> None:
    stmt = parse_statement(
        "insert into c1 using st tags(1) (ts, v) values(now, 1)(now+1s, -2) c2 values('2025-01-01 00:00:00', 3)"
    )
    assert isinstance(stmt, ast.Insert)
    first, second = stmt.targets
    assert first.using is not None and first.columns == ("ts", "v")
    assert first.rows[1][0] == ast.Binary("+", ast.Func("now", ()), ast.DurationLiteral(Duration(1, "s")))
    assert first.rows[1][1] == ast.Literal(-2, "int")
    assert second.table.name == "c2" and second.rows[0][0] == ast.Literal("2025-01-01 00:00:00", "string")


def test_select_clauses() -> None:
    stmt = parse_statement(
        "select _wstart, avg(v) as a, count(*) c from st where g > 1 and ts >= '2025-01-01' partition by tbname "
        "interval(10s, 2s) sliding(5s) fill(none) order by a desc limit 5 offset 2"
    )
    assert isinstance(stmt, ast.Query)
    select = stmt.select
    assert [i.alias or i.text for i in select.items] == ["_wstart", "a", "c"]
    assert select.window == ast.IntervalWindow(Duration(10, "s"), Duration(2, "s"), Duration(5, "s"), ast.Fill("NONE"))
    assert select.partition_by == (ast.Column("tbname"),)
    assert select.order_by[0].descending and (select.limit, select.offset) == (5, 2)


def test_unaliased_items_keep_their_source_text() -> None:
    stmt = parse_statement("select avg(cint), cast(_tlocaltime/1000000 as timestamp) exec_ts from t")
    assert isinstance(stmt, ast.Query)
    assert [(i.text, i.alias) for i in stmt.select.items] == [
        ("avg(cint)", None),
        ("cast(_tlocaltime/1000000 as timestamp)", "exec_ts"),
    ]


def test_create_stream_full_grammar() -> None:
    stmt = parse_statement(
        "create stream if not exists d.s1 interval(10s, 1s) sliding(5s) from st partition by tbname, g "
        "stream_options(watermark(2s) | fill_history('2025-01-01 00:00:00') | pre_filter(v > 0) | "
        "event_type(window_open|window_close) | max_delay(3s)) "
        "notify('ws://127.0.0.1:9/n') on(window_open|window_close) where c > 1 notify_options(notify_history) "
        "into out output_subtable(concat('o_', tbname)) (ts, k composite key, c) "
        "tags (grp int comment 'group' as g) as select _twstart, %%1, count(*) c from %%trows"
    )
    assert isinstance(stmt, ast.CreateStream)
    assert stmt.name == ast.QualifiedName("s1", "d") and stmt.if_not_exists
    assert stmt.trigger == ast.SlidingTrigger(Duration(5, "s"), None, Duration(10, "s"), Duration(1, "s"))
    assert stmt.trigger.kind == "INTERVAL"
    assert [o.name for o in stmt.options] == ["WATERMARK", "FILL_HISTORY", "PRE_FILTER", "EVENT_TYPE", "MAX_DELAY"]
    assert stmt.option("FILL_HISTORY").start == ast.Literal("2025-01-01 00:00:00", "string")  # type: ignore[union-attr]
    assert stmt.option("EVENT_TYPE").event_types == ("WINDOW_OPEN", "WINDOW_CLOSE")  # type: ignore[union-attr]
    assert stmt.notification == ast.Notification(
        ("ws://127.0.0.1:9/n",),
        ("WINDOW_OPEN", "WINDOW_CLOSE"),
        ast.Binary(">", ast.Column("c"), ast.Literal(1, "int")),
        ("NOTIFY_HISTORY",),
    )
    assert stmt.columns == ("ts", "k", "c") and stmt.composite_key
    assert stmt.tags == (ast.OutputTag("grp", ast.DataType("INT"), ast.Column("g"), "group"),)
    assert stmt.query is not None and isinstance(stmt.query.source, ast.PlaceholderSource)


@pytest.mark.parametrize(
    ("sql", "trigger"),
    [
        ("period(1h, 10m)", ast.PeriodTrigger(Duration(1, "h"), Duration(10, "m"))),
        ("sliding(1s, 100a) from t", ast.SlidingTrigger(Duration(1, "s"), Duration(100, "a"))),
        ("session(ts, 12+30s) from t", ast.SessionTrigger(ast.Column("ts"), Duration(30012, "a"))),
        ("state_window(c) true_for(5s) from t", ast.StateTrigger(ast.Column("c"), Duration(5, "s"))),
        (
            "event_window(start with (c >= 90, c >= 60)) from t",
            ast.EventTrigger(
                (
                    ast.Binary(">=", ast.Column("c"), ast.Literal(90, "int")),
                    ast.Binary(">=", ast.Column("c"), ast.Literal(60, "int")),
                ),
                (),
            ),
        ),
        ("count_window(6, 3, a, b) from t", ast.CountTrigger(6, 3, (ast.Column("a"), ast.Column("b")))),
    ],
)
def test_each_trigger(sql: str, trigger: ast.Trigger) -> None:
    stmt = parse_statement(f"create stream s {sql} into o as select _tlocaltime, count(*) from t")
    assert isinstance(stmt, ast.CreateStream)
    assert stmt.trigger == trigger


def test_stream_management_statements() -> None:
    statements = parse_script(
        "drop stream if exists d.s; show d.streams; start stream if exists ignore untreated s; stop stream s;"
        "recalculate stream s from '2025-01-01 00:00:00' to 1735693200000"
    )
    drop, show, start, stop, recalc = statements
    assert isinstance(drop, ast.DropStream) and drop.if_exists and drop.name.db == "d"
    assert isinstance(show, ast.Show) and (show.what, show.db) == ("STREAMS", "d")
    assert isinstance(start, ast.StartStream) and start.if_exists and start.ignore_untreated
    assert isinstance(stop, ast.StopStream) and not stop.if_exists
    assert isinstance(recalc, ast.RecalculateStream) and recalc.end == ast.Literal(1735693200000, "int")


@pytest.mark.parametrize(
    ("sql", "line", "column", "expected"),
    [
        ("select * fromm t", 1, 10, "expected end of statement, found 'fromm'"),
        ("create stream s interval(1s) from t into o as select 1", 1, 30, "SLIDING(...) after INTERVAL"),
        ("insert into t values(now, 1", 1, 28, "expected ')', found end of statement"),
        ("create\n table t (ts timestamp, v inty)", 2, 27, "unknown data type 'inty'"),
        ("create database d precision 'xs'", 1, 29, "invalid precision 'xs'"),
        ("select 'abc from t", 1, 8, "unterminated"),
        ("create stream s state_window(c) from t options(watermark(1.5s)) into o as select 1", 1, 58, "fractional"),
    ],
)
def test_syntax_errors_have_positions_and_say_what_is_expected(sql: str, line: int, column: int, expected: str) -> None:
    with pytest.raises(SqlSyntaxError) as info:
        parse_statement(sql)
    assert (info.value.line, info.value.column) == (line, column)
    assert expected in str(info.value)
    assert str(info.value).startswith(f"error at line {line}, column {column}: ")


# pieces of one-row INSERTs: what insert_row.py reads (drawn more often), and what it must
# leave to the grammar
def _mostly(plain: list[str], odd: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from(plain * 4 + odd)


_SPACE = _mostly([" ", "  ", "\n", "\t"], ["\u00a0", "\u3000", " \n ", "\u00a0é"])
_GAP = _mostly(["", " "], ["\n", "\u00a0", "\u00a01"])
_NAMES = _mostly(["c1", "C_1", "values", "insert", "t$x", "é", "`c 1`"], ["`a``b`", "``", "1c", "now", "`x"])
_VALUES = _mostly(
    [
        "1",
        "-1",
        "+2",
        "1.",
        ".5",
        "-0.0",
        "1e5",
        "-1E-3",
        "12345678901234567890",
        "١٢",
        "'a'",
        "'it''s'",
        "'x\ny'",
        '"q""r"',
        "''",
        "NULL",
        "null",
        "TrUe",
        "false",
        "falſe",
        "'2025-01-01 00:00:00'",
    ],
    ["- 3", "-+4", "--5", "1e", "1s", "0x1F", "1.5.3", "'a\\'b'", "nullx", "now", "now()", "now+1s", "1+1", "(1)"],
)


@st.composite
def _one_row_inserts(draw: st.DrawFn) -> str:
    words = [draw(_mostly(["insert", "INSERT", "Insert"], ["inſert", "insert_"])), draw(_SPACE)]
    words += [draw(_mostly(["into", "INTO"], ["ınto"])), draw(_SPACE)]
    if draw(st.booleans()):
        words += [draw(_NAMES), draw(_mostly(["."], [" .", ". "]))]
    words.append(draw(_NAMES))
    if draw(st.booleans()):
        names = draw(st.lists(_NAMES, min_size=1, max_size=3))
        words += [draw(_GAP), "(", draw(_GAP), f"{draw(_GAP)},{draw(_GAP)}".join(names), draw(_GAP), ")"]
    words += [draw(_SPACE), draw(st.sampled_from(["values", "VALUES", "values "]))]
    values = draw(st.lists(_VALUES, max_size=4))
    words += [draw(_GAP), "(", draw(_GAP), f"{draw(_GAP)},{draw(_GAP)}".join(values), draw(_GAP), ")"]
    words.append(draw(_mostly(["", ";", " ; ", "\n"], [";;", " -- done", " (2)", ", (2)", "; select 1"])))
    return draw(st.sampled_from(["", " ", "\n "])) + "".join(words)


def _positions(insert: ast.Insert) -> list[object]:
    target = insert.targets[0]
    return [insert.pos, insert.text, target.pos, target.table.pos, *(value.pos for value in target.rows[0])]


@settings(max_examples=1000, deadline=None)
@given(_one_row_inserts())
def test_a_one_row_insert_read_by_patterns_is_the_grammars_statement(sql: str) -> None:
    """``insert_row.py`` reads only what the grammar reads the same way: the same statement,
    positions and source text (which the dataclasses leave out of ``==``)."""
    fast = one_row_insert(sql)
    try:
        grammar = [parse_statement_text(part, sql) for part in split_statements(sql)]
    except SqlSyntaxError:
        assert fast is None
        return
    if fast is not None:
        assert grammar == [fast]
        assert isinstance(grammar[0], ast.Insert) and _positions(grammar[0]) == _positions(fast)
        assert [dataclasses.astuple(v) for v in grammar[0].targets[0].rows[0]] == [
            dataclasses.astuple(v) for v in fast.targets[0].rows[0]
        ]


@pytest.mark.parametrize(
    "sql",
    [
        "insert into c1 values (1700000000000, 1, 1.5)",
        " INSERT INTO d.`c 1` (ts, `v`)\nVALUES('2025-01-01 00:00:00', -1.5e3, 'it''s', NULL, true);\n",
        "insert\tinto c1 values(+1,\n'a\nb', false) ;",
    ],
)
def test_a_plain_one_row_insert_is_read_by_patterns_and_parses_as_the_grammar_does(sql: str) -> None:
    fast = one_row_insert(sql)
    assert fast is not None
    [statement] = parse_script(sql)
    assert isinstance(statement, ast.Insert) and statement == fast and _positions(statement) == _positions(fast)
    grammar = parse_statement_text(split_statements(sql)[0], sql)
    assert isinstance(grammar, ast.Insert)
    assert grammar == fast and _positions(grammar) == _positions(fast)
