"""Virtual tables (TDengine 3.3.6+): the grammar.

Owns reading ``CREATE VTABLE [IF NOT EXISTS] [db.]name (ts TIMESTAMP, col type [FROM
[db.]table.col], …)`` (a virtual normal table), ``CREATE VTABLE [IF NOT EXISTS] [db.]name
[(col FROM [db.]table.col, …) | ([db.]table.col, …)] USING vstb [(tags)] TAGS (…)`` (a virtual
child table, its sources named or in column order), ``ALTER VTABLE t ALTER COLUMN c SET
{[db.]table.column | NULL}`` and ``… SET TAG t = v, …``, and ``DROP VTABLE [IF EXISTS] names``,
called by the parser after the words that name the statement. A virtual super table is a
``CREATE STABLE … VIRTUAL 1``, read by the parser's CREATE TABLE. Does not read the catalog:
``families/vtable.py`` checks the sources and creates the tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import ast
from .tokens import Kind

if TYPE_CHECKING:
    from .parser import Parser


def parse_create_vtable(p: Parser) -> ast.CreateVirtualTable:
    if_not_exists = p.accept_words("IF", "NOT", "EXISTS")
    name = p.qualified_name("a virtual table name")
    columns: list[ast.ColumnDef] = []
    refs: list[tuple[str | None, ast.ColumnRef | None]] = []
    if p.peek().is_op("("):
        p.expect_op("(")
        form = None  # DEFINED (a normal table's columns), NAMED or POSITIONAL (a child's sources)
        while True:
            tok = p.peek()
            entry_form = _entry_form(p)
            if form is not None and entry_form != form:
                raise p.fail_at(_MIXED[form], tok)
            form = entry_form
            if form == "DEFINED":
                column = p.column_def()
                columns.append(column)
                refs.append((column.name, _column_ref(p) if p.accept_word("FROM") else None))
            elif form == "NAMED":
                column_name = p.ident("a column name").name
                p.expect_word("FROM")
                refs.append((column_name, _column_ref(p)))
            else:
                refs.append((None, _column_ref(p)))
            if not p.accept_op(","):
                break
        p.expect_op(")")
        if form == "DEFINED":
            if p.peek().is_word("USING"):
                raise p.error("end of statement (a virtual child table takes its columns from its super table)")
            return ast.CreateVirtualTable(name, if_not_exists, tuple(columns), tuple(refs))
    if not p.peek().is_word("USING"):
        raise p.error("USING a virtual super table, or column definitions such as (ts TIMESTAMP, v INT FROM t.v)")
    using = p.child_table_def(if_not_exists=if_not_exists, name=name)
    return ast.CreateVirtualTable(name, if_not_exists, (), tuple(refs), using)


_MIXED = {
    "DEFINED": "a virtual normal table defines each column: name, type and an optional FROM [db.]table.column",
    "NAMED": "a virtual child table names every source as column FROM [db.]table.column, or none",
    "POSITIONAL": "a virtual child table lists every source as [db.]table.column in column order, or names each",
}


def _entry_form(p: Parser) -> str:
    """What the next entry of the column list is: a column definition (``name type``), a
    named source (``name FROM …``) or a source in column order (``table.column``)."""
    following = p.peek(1)
    if following.is_word("FROM"):
        return "NAMED"
    if following.is_op("."):
        return "POSITIONAL"
    return "DEFINED"


def _column_ref(p: Parser) -> ast.ColumnRef:
    """``[db.]table.column``."""
    first = p.ident("a source table.column")
    parts = [first]
    while len(parts) < 3 and p.accept_op("."):
        parts.append(p.ident("a source table.column"))
    if len(parts) == 1:
        raise p.error("'.' and a column: a source is [db.]table.column")
    names = [t.name for t in parts]
    db = names[0] if len(names) == 3 else None
    return ast.ColumnRef(db, names[-2], names[-1], p.pos(first))


def parse_alter_vtable(p: Parser) -> ast.AlterVirtualColumn | ast.AlterTableSetTags:
    name = p.qualified_name("a virtual table name")
    if p.accept_words("ALTER", "COLUMN"):
        column = p.ident("a column name")
        p.expect_word("SET")
        ref = None if p.accept_word("NULL") else _column_ref(p)
        return ast.AlterVirtualColumn(name, column.name, ref, p.pos(column))
    if not p.accept_words("SET", "TAG"):
        raise p.error("ALTER COLUMN c SET [db.]table.column | NULL, or SET TAG name = value")
    return p.tag_assignments(name)


def parse_drop_vtable(p: Parser) -> ast.DropVirtualTables:
    if_exists = p.accept_words("IF", "EXISTS")
    return ast.DropVirtualTables(tuple(p.comma_list(lambda: p.qualified_name("a virtual table name"))), if_exists)


def is_vtables(p: Parser) -> bool:
    """Whether SHOW's next words are [NORMAL | CHILD] [db.]VTABLES."""
    tok = p.peek()
    if tok.is_word("VTABLES"):
        return True
    return tok.is_word("NORMAL", "CHILD") and (p.peek(1).is_word("VTABLES") or p.peek(3).is_word("VTABLES"))


def parse_show_vtables(p: Parser, db: str | None) -> ast.Show:
    """SHOW [NORMAL | CHILD] [db.]VTABLES [LIKE …] (``db``: a prefix read before NORMAL/CHILD)."""
    kind = p.accept_word("NORMAL", "CHILD")
    if db is None and p.peek().kind in (Kind.IDENT, Kind.QUOTED_IDENT) and p.peek(1).is_op("."):
        db = p.next().name
        p.next()
    p.expect_word("VTABLES")
    like = p.string("a LIKE pattern") if p.accept_word("LIKE") else None
    return ast.Show("VTABLES", db, like, kind.upper if kind is not None else None)
