"""Writes docs/sql-support.md from the translator's function tables (run after changing them;
tests/test_functions.py fails while the file is stale).

    .venv/bin/python scripts/sql_support.py
"""

from pathlib import Path

from dagster_tdstream.sql.translate.functions import sql_support_markdown

if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / "docs" / "sql-support.md"
    target.write_text(sql_support_markdown())
    print(f"wrote {target}")
