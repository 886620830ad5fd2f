"""Last-row queries answered from the newest data (TDengine's last-row cache, here).

Owns recognising a SELECT that asks only for the newest rows of one table — ``last_row`` and
``last`` (with their companion columns, scalar functions around them), over all its rows, per
child table or per tag, filtered on tags only — and the time floor below which no child
table's newest row lies: the oldest of the child tables' write watermarks (the catalog's
newest timestamp per child table, trusted only when it accounts for the table's current Delta
version). Such a query reads only the files whose statistics reach above the floor
(``SparkViews(floors=…)``), provided the check here proves nothing was missed: every child
table's newest stored row is above the floor (deletes leave the watermarks as upper bounds)
and, for ``last``, every value came out non-NULL (a NULL may mean the last non-NULL value is
older). Must not change what a query means: whatever it cannot prove, the caller runs over
the whole table.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..sql import ast
from ..sql.translate.functions import OTHER, SCALARS, TIME_FUNCTIONS
from ..sql.walk import walk
from ..storage.catalog import TableInfo
from ..storage.system import SYSTEM_DB
from ..storage.warehouse import Warehouse

SELECTORS = frozenset({"last", "last_row"})


@dataclass(frozen=True)
class NewestRows:
    """The one table a last-row query reads, the version it reads, the floor above which it
    reads it, and the newest timestamp of every child table holding rows at that version (the
    watermarks the floor came from)."""

    table: TableInfo
    version: int
    floor: int
    newest: dict[str, int]
    values_may_be_older: bool  # last(): a NULL result may hide an older non-NULL value
    value_columns: tuple[int, ...] | None  # result columns to check for NULL (None: all)

    @property
    def floors(self) -> dict[str, tuple[int, int]]:
        return {f"{self.table.db}.{self.table.name}": (self.floor, self.version)}

    def covers(self, warehouse: Warehouse) -> bool:
        """Whether every child table's newest stored row lies above the floor: its newest
        timestamp read there equals its watermark (a deleted newest row makes them differ).
        Read in Arrow from the few files above the floor: two columns, no Spark job."""
        pk = self.table.primary_key
        is_super = self.table.kind != "normal"
        columns = ["tbname", pk] if is_super else [pk]
        rows = warehouse.delta.read(
            self.table.db, self.table.storage_name, columns, [(pk, ">=", self.floor)], self.version
        )
        if self.table.kind == "child":
            rows = rows.filter(pc.equal(rows["tbname"], self.table.name))
        if not is_super:
            found = {self.table.name: pc.max(rows[pk]).as_py()} if rows.num_rows else {}
        else:
            newest = rows.group_by("tbname").aggregate([(pk, "max")])
            found = dict(zip(newest["tbname"].to_pylist(), newest[f"{pk}_max"].to_pylist(), strict=True))
        return found == self.newest

    def complete(self, result: pa.Table) -> bool:
        """Whether the result read above the floor is the whole answer."""
        if not self.values_may_be_older:
            return True
        indexes = range(result.num_columns) if self.value_columns is None else self.value_columns
        return all(pc.sum(pc.is_null(result.column(i))).as_py() == 0 for i in indexes)


def newest_rows(select: ast.Select, warehouse: Warehouse, default_db: str | None) -> NewestRows | None:
    """The newest-rows plan of a last-row query, or None when the query is not one or the
    table's watermarks are not trusted (the query then reads the whole table)."""
    source = select.source
    if not isinstance(source, ast.TableSource) or not _only_newest(select):
        return None
    db = _lower(source.table.db or default_db or "")
    if not db or db == SYSTEM_DB:
        return None
    table = warehouse.find_table(db, _lower(source.table.name))
    if table is None or table.kind not in ("super", "child", "normal"):
        return None
    labels = {"tbname", *(tag.name for tag in table.tags)}
    if select.where is not None and any(
        isinstance(node, ast.Column) and _lower(node.name) not in labels for node in walk(select.where)
    ):
        return None  # a condition on the rows: the newest qualifying row may be old
    if any(_lower(_name(e)) not in labels for e in (*select.partition_by, *select.group_by)):
        return None
    trusted = warehouse.trusted_watermarks(table)
    if trusted is None or not trusted[1]:
        return None
    version, newest = trusted
    uses_last = any(isinstance(n, ast.Func) and n.name == "last" for item in select.items for n in walk(item.expr))
    if any(
        isinstance(n, ast.Star) or (isinstance(n, ast.Func) and len(n.args) > 1)
        for item in select.items
        for n in walk(item.expr)
    ):
        value_columns = None  # last(*) and last(a, b) expand: check every column
    else:
        value_columns = tuple(
            i
            for i, item in enumerate(select.items)
            if any(isinstance(n, ast.Func) and n.name == "last" for n in walk(item.expr))
        )
    return NewestRows(table, version, min(newest.values()), newest, uses_last, value_columns)


def _only_newest(select: ast.Select) -> bool:
    """Only last/last_row as aggregates (at least one), no window, no subquery, no join."""
    if select.window is not None or select.distinct:
        return False
    selectors = 0
    for item in select.items:
        for node in walk(item.expr):
            if isinstance(node, ast.Func):
                if node.name in SELECTORS:
                    selectors += 1
                elif node.name not in SCALARS and node.name not in TIME_FUNCTIONS and node.name not in OTHER:
                    return False
            elif not isinstance(node, ast.Column | ast.Star | ast.Literal | ast.Unary | ast.Binary | ast.Cast):
                return False  # subqueries, placeholders, CASE …: not worth proving
    return selectors > 0


def _lower(name: str) -> str:
    return name.lower()  # names are case-insensitive; the catalog keeps them in lower case


def _name(expr: ast.Expr) -> str:
    return expr.name if isinstance(expr, ast.Column) else ""
