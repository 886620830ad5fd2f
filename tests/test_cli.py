"""The tdstream command line: sql in every output format, files, errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from dagster_tdstream.cli.main import main

SETUP = (
    "create database d precision 'ms'; use d;"
    "create stable st (ts timestamp, v int, s varchar(8)) tags (g int);"
    "insert into c1 using st tags (1) values ('2025-01-01 08:00:00', 1, 'a') ('2025-01-01 08:00:01', null, 'b');"
)


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_sql_prints_ok_and_tables(tmp_path: Path, spark: object) -> None:
    wh = str(tmp_path / "wh")
    code, out, _ = invoke("sql", "--warehouse", wh, "--timezone", "Asia/Shanghai", SETUP)
    assert code == 0
    assert out.splitlines() == ["Create OK", "Database changed to d", "Create OK", "Insert OK, 2 row(s) affected"]
    code, out, _ = invoke("sql", "--warehouse", wh, "--timezone", "Asia/Shanghai", "-d", "d", "select ts, v, s from c1")
    assert code == 0
    assert out.splitlines() == [
        "ts                      | v    | s",
        "==================================",
        "2025-01-01 08:00:00.000 | 1    | a",
        "2025-01-01 08:00:01.000 | NULL | b",
        "Query OK, 2 row(s) in set",
    ]


def test_sql_json_and_csv(tmp_path: Path, spark: object) -> None:
    wh = str(tmp_path / "wh")
    invoke("sql", "--warehouse", wh, "--timezone", "UTC", SETUP)
    code, out, _ = invoke(
        "sql", "--warehouse", wh, "--timezone", "UTC", "--format", "json",
        "use d; select ts, v from st order by ts; show stables",
    )  # fmt: skip
    assert code == 0
    first, second = (json.loads(line) for line in out.splitlines())
    assert first == {
        "columns": ["ts", "v"],
        "rows": [["2025-01-01 08:00:00.000", 1], ["2025-01-01 08:00:01.000", None]],
    }
    assert second["columns"][:2] == ["stable_name", "db_name"] and second["rows"][0][:2] == ["st", "d"]
    code, out, _ = invoke("sql", "--warehouse", wh, "--format", "csv", "-d", "d", "select s, g from st order by s")
    assert out.splitlines() == ["s,g", "a,1", "b,1"]


def test_sql_file_and_errors(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    script = tmp_path / "setup.sql"
    script.write_text(SETUP)
    code, _, _ = invoke("sql", "--warehouse", wh, "-f", str(script))
    assert code == 0
    code, out, err = invoke("sql", "--warehouse", wh, "-d", "d", "insert into c1 values\n (1, 2, 'x', 4)")
    assert code == 1 and out == ""
    assert err.strip() == "error at line 2, column 3: expected 3 value(s) for table c1, got 4"
    code, _, err = invoke("sql", "--warehouse", wh, "select from")
    assert code == 1 and err.strip() == "error at line 1, column 8: expected an expression, found 'from'"
    assert "Traceback" not in err
    code, _, err = invoke("sql", "--warehouse", wh, "--debug", "select from")
    assert code == 1 and "Traceback" in err


def test_a_syntax_error_anywhere_runs_nothing(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    code, _, err = invoke("sql", "--warehouse", wh, "create database d; create tablez x")
    assert code == 1 and "line 1, column 27" in err
    code, out, _ = invoke("sql", "--warehouse", wh, "--format", "csv", "show databases")
    # only TDengine's two system databases: the CREATE before the error did not run
    assert code == 0 and out.splitlines() == [
        "name,create_time,vgroups,precision,keep",
        "information_schema,NULL,NULL,ms,NULL",
        "performance_schema,NULL,NULL,ms,NULL",
    ]


def test_shell_reads_multi_line_statements_sources_files_and_survives_errors(tmp_path: Path, spark: object) -> None:
    wh = str(tmp_path / "wh")
    script = tmp_path / "more.sql"
    script.write_text("insert into d.c1 values ('2025-01-01 08:00:02', 3, 'c;d');\n")
    typed = "\n".join(
        [
            "create database d precision 'ms';",
            "use d; create stable st (ts timestamp, v int, s varchar(8))",
            "  tags (g int);",
            "insert into c1 using st tags (1) values ('2025-01-01 08:00:00', 1, 'a;",  # ';' inside a string
            "b');",
            "select * from nowhere;",  # an error: one line, the shell goes on
            f"source {script}",
            "select count(*) n,",
            "  sum(v) s from st;",
            "help",
            "quit",
            "select 'never run';",
        ]
    )
    result = CliRunner().invoke(main, ["shell", "--warehouse", wh, "--timezone", "UTC"], input=typed + "\n")
    assert result.exit_code == 0
    lines = [line.split(" (")[0] if line.endswith("s)") else line for line in result.stdout.splitlines()]
    assert lines[:5] == ["Create OK", "Database changed to d", "Create OK", "Insert OK, 1 row(s) affected",
                         "error at line 1, column 1: table d.nowhere does not exist"]  # fmt: skip
    assert lines[5:10] == [
        "Insert OK, 1 row(s) affected",
        "n | s",
        "=====",
        "2 | 4",
        "Query OK, 1 row(s) in set",
    ]
    assert "source FILE   run the statements of a SQL file" in result.stdout
    assert "never run" not in result.stdout
