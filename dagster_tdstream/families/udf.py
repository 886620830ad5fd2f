"""User-defined functions: ``CREATE [OR REPLACE] [AGGREGATE] FUNCTION`` and ``DROP FUNCTION``.

Owns the rules TDengine applies when a function is declared — a name no built-in function has,
one function per name unless OR REPLACE (which keeps the creation time and counts the version
up), a Python UDF's file read into the catalog at CREATE (a missing file, a syntax error or a
missing ``process`` / ``start``-``reduce``-``finish`` is refused then, not at its first call) —
and keeping them in the warehouse's function catalog. A C UDF's library is recorded, not
loaded: it is built for TDengine's udfd, which does not run here, so a call is refused with
that reason (``sql/translate/render.py``); declaring one still works, as scripts that create C
functions and the statements that name them (a TSMA refusing a UDF) expect. Does not run code:
``compute/udf.py`` does.
"""

from __future__ import annotations

import ast as pyast
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CatalogError, QueryError
from ..results import Result
from ..sql import ast
from ..sql.translate.render import SUPPORTED_FUNCTIONS
from ..storage.functions import UserFunction

if TYPE_CHECKING:
    from ..storage.warehouse import Warehouse

# what TDengine calls in a Python UDF, by kind
_ENTRY_POINTS = {False: ("process",), True: ("start", "reduce", "finish")}


def create(warehouse: Warehouse, stmt: ast.CreateFunction) -> Result:
    where = {"line": stmt.pos.line or None, "column": stmt.pos.column or None}
    if stmt.name in SUPPORTED_FUNCTIONS:
        raise QueryError(f"Invalid function name: {stmt.name} is a built-in function", **where)
    old = warehouse.functions.get(stmt.name)
    if old is not None and not stmt.or_replace:
        if stmt.if_not_exists:
            return Result(message="Create OK, 0 row(s) affected (the function exists)")
        raise CatalogError(f"Func already exists: {stmt.name} (CREATE OR REPLACE FUNCTION replaces it)", **where)
    code, code_len, note = _code(stmt, where)
    warehouse.functions.put(
        UserFunction(
            name=stmt.name,
            aggregate=stmt.aggregate,
            output_type=stmt.output_type,
            bufsize=stmt.bufsize,
            language=stmt.language,
            path=stmt.path,
            code=code,
            code_len=code_len,
            version=old.version + 1 if old is not None else 1,
            created_at=old.created_at if old is not None else time.time_ns() // 10**6,
        )
    )
    return Result(message="Create OK, 0 row(s) affected" + note)


def _code(stmt: ast.CreateFunction, where: dict[str, int | None]) -> tuple[str | None, int, str]:
    """A Python UDF's source and length, checked; a C library's length when it is there."""
    path = Path(stmt.path).expanduser()
    if stmt.language == "C":
        size = path.stat().st_size if path.is_file() else 0
        return None, size, " (a C UDF is recorded, not loaded: calling it needs a LANGUAGE 'Python' UDF here)"
    if not path.is_file():
        raise QueryError(f"Invalid UDF file: {stmt.path!r} is not a readable Python file", **where)
    try:
        code = path.read_text(encoding="utf-8")
        tree = pyast.parse(code, filename=str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise QueryError(f"Invalid UDF file: {stmt.path!r} cannot be read: {exc}", **where) from None
    except SyntaxError as exc:
        raise QueryError(f"Invalid UDF file: {stmt.path!r} line {exc.lineno}: {exc.msg}", **where) from None
    defined = {node.name for node in tree.body if isinstance(node, pyast.FunctionDef)}
    missing = [name for name in _ENTRY_POINTS[stmt.aggregate] if name not in defined]
    if missing:
        kind = "an aggregate" if stmt.aggregate else "a scalar"
        raise QueryError(
            f"Invalid UDF file: {stmt.path!r} defines no {', '.join(missing)}(), which {kind} Python UDF needs",
            **where,
        )
    return code, len(code.encode()), ""


def drop(warehouse: Warehouse, stmt: ast.DropFunction) -> Result:
    if not warehouse.functions.drop(stmt.name) and not stmt.if_exists:
        raise CatalogError(f"Func not exist: {stmt.name}", line=stmt.pos.line or None, column=stmt.pos.column or None)
    return Result(message="Drop OK, 0 row(s) affected")
