"""INSERT: each target table's rows as Arrow columns of its types, then one warehouse write.

Owns resolving INSERT targets (existing tables, child tables created by ``USING … TAGS``),
column lists, and converting values. A plain-literal block (``sql/values.py``) is converted
column by column with Arrow's parsers where the column's rule is a plain parse; every other
value — and a whole block column holding anything the vectorised reading is not sure to read
the same — goes through the per-value rule (``constants.evaluate`` + ``types.coerce``), which
is the definition and gives the error with its position. Must not write storage itself
(``Warehouse.write`` does, all tables or none) nor parse SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CatalogError, TDStreamError, WriteRejectedError
from ..results import Result
from ..sql import ast
from ..sql.constants import ConstantContext, evaluate
from ..sql.values import block_columns, literal_offset
from ..storage.catalog import TableInfo
from ..storage.types import STRING_TYPES, ValueTypeError, arrow_schema, arrow_type, coerce, value_range
from ..storage.warehouse import WriteBatch
from . import vtable

if TYPE_CHECKING:
    from ..session import Session

_INTEGER = r"^-?\d{1,18}$"  # 18 digits always fit int64; longer ones take the per-value rule
_DECIMAL = r"^-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$"
_BOOLEAN = r"(?i)^(?:true|false)$"
_NULL = r"(?i)^null$"


@dataclass(frozen=True)
class PreparedInsert:
    """An INSERT's checked rows, ready for one warehouse write (nothing written yet)."""

    batches: tuple[WriteBatch, ...]
    new_children: tuple[TableInfo, ...]  # created by the write (INSERT … USING)
    rows: int


def execute_insert(session: Session, stmt: ast.Insert) -> Result:
    prepared = prepare_insert(session, stmt)
    session.warehouse.write(prepared.batches, prepared.new_children)
    return inserted(prepared.rows)


def inserted(rows: int) -> Result:
    return Result(message=f"Insert OK, {rows} row(s) affected", affected=rows)


def prepare_insert(session: Session, stmt: ast.Insert) -> PreparedInsert:
    """Resolve, check and convert every target's rows; raises what a rejected statement
    raises, with its position."""
    # the statement's tables and databases are looked up once, not per target: an INSERT into
    # 100 child tables spent most of its time in catalog reads
    named: dict[str, set[str]] = {}
    for target in stmt.targets:
        named.setdefault(session.db_of(target.table), set()).add(target.table.name.lower())
    tables = {
        (db, name): info
        for db, names in named.items()
        for name, info in session.warehouse.find_tables(db, sorted(names)).items()
    }
    contexts = {db: session.constants(db) for db in named}
    shared = _blocks_read_together(
        stmt.targets, [tables.get((session.db_of(t.table), t.table.name.lower())) for t in stmt.targets]
    )
    batches: list[WriteBatch] = []
    new_children: list[TableInfo] = []
    total = 0
    for index, target in enumerate(stmt.targets):
        db = session.db_of(target.table)
        name = target.table.name.lower()  # names are case-insensitive
        info = tables.get((db, name))
        if info is None:
            if target.using is None:
                raise CatalogError(
                    f"table {db}.{name} does not exist; create it or write INSERT INTO {name} USING stable TAGS (...)",
                    line=target.pos.line,
                    column=target.pos.column,
                )
            _, info = session._child(target.using, db)
            new_children.append(info)
            tables[(db, name)] = info
        if info.virtual:
            raise WriteRejectedError(
                f"{info.db}.{info.name} is a virtual table: it reads its sources' columns and stores no rows "
                f"(insert into {vtable.sources_text(info)})",
                line=target.pos.line,
                column=target.pos.column,
            )
        if info.kind == "super":
            raise WriteRejectedError(
                f"{info.name} is a super table: insert into a child table "
                f"(INSERT INTO ct USING {info.name} TAGS (...))",
                line=target.pos.line,
                column=target.pos.column,
            )
        data = _target_data(target, info, _positions(target, info), contexts[db], shared.get(index))
        total += data.num_rows
        batches.append(WriteBatch(info, data))
    return PreparedInsert(tuple(batches), tuple(new_children), total)


def _positions(target: ast.InsertTarget, info: TableInfo) -> list[int]:
    """The table column each value of a tuple goes to."""
    if target.columns is None:
        return list(range(len(info.columns)))
    by_name = {c.name: i for i, c in enumerate(info.columns)}
    positions: list[int] = []
    for col in target.columns:
        index = by_name.get(col.lower())
        if index is None:
            raise WriteRejectedError(
                f"table {info.name} has no column {col} (columns: {', '.join(by_name)})",
                line=target.pos.line,
                column=target.pos.column,
            )
        if index in positions:
            raise WriteRejectedError(f"column {col} is listed twice", line=target.pos.line, column=target.pos.column)
        positions.append(index)
    if 0 not in positions:
        raise WriteRejectedError(
            f"the column list must include the primary key {info.primary_key}",
            line=target.pos.line,
            column=target.pos.column,
        )
    return positions


def _blocks_read_together(
    targets: Sequence[ast.InsertTarget], infos: Sequence[TableInfo | None]
) -> dict[int, list[pa.Array]]:
    """The block arrays of targets whose blocks are read in one go, by target index: the blocks
    of existing tables with the same columns and column list are concatenated column by column
    and read by ``_vectorised`` once, not once per table (an INSERT of 10 rows into each of 100
    tables spent half its time in 300 small readings). A group with any column the vectorised
    reading is not sure of is left out whole: each of its targets then goes its own way, which
    is the definition and raises the errors, in the statement's order."""
    Group = tuple[tuple[ast.ColumnDef, ...], tuple[int, ...]]
    groups: dict[Group, list[tuple[int, ast.ValuesBlock]]] = {}
    for index, (target, info) in enumerate(zip(targets, infos, strict=True)):
        if target.block is None or info is None or info.virtual or info.kind == "super":
            continue
        try:
            positions = _positions(target, info)
        except WriteRejectedError:
            continue  # raised in its turn
        if target.block.width == len(positions):
            groups.setdefault((info.columns, tuple(positions)), []).append((index, target.block))
    shared: dict[int, list[pa.Array]] = {}
    for (columns, positions), members in groups.items():
        if len(members) < 2:  # a block alone is read by _block_arrays (split once, not here too)
            continue
        texts = [block_columns(block.text, block.width) for _, block in members]
        vectors = [
            _vectorised(pa.array([text for table in texts for text in table[value]], pa.string()), columns[index])
            for value, index in enumerate(positions)
        ]
        if any(vector is None for vector in vectors):
            continue
        offset = 0
        for (target_index, _), table in zip(members, texts, strict=True):
            count = len(table[0])
            parts = [vector.slice(offset, count) for vector in vectors]  # type: ignore[union-attr]
            shared[target_index] = _in_table_order(columns, positions, parts, count)
            offset += count
    return shared


def _in_table_order(
    columns: Sequence[ast.ColumnDef], positions: Sequence[int], vectors: Sequence[pa.Array], count: int
) -> list[pa.Array]:
    """A block's value columns placed at their table columns, the columns not listed NULL."""
    arrays = [pa.nulls(count, arrow_type(col.type)) for col in columns]
    for vector, index in zip(vectors, positions, strict=True):
        arrays[index] = vector
    return arrays


def _target_data(
    target: ast.InsertTarget,
    info: TableInfo,
    positions: list[int],
    ctx: ConstantContext,
    block_arrays: list[pa.Array] | None = None,
) -> pa.Table:
    """The target's rows (block first, then the other tuples, as written) in the table's schema;
    ``block_arrays``: its block already read (``_blocks_read_together``)."""
    parts: list[list[pa.Array]] = []
    where: list[Callable[[int, int], ast.Pos]] = []  # per part: (row, value) → position
    if target.block is not None:
        parts.append(block_arrays or _block_arrays(target.block, info, positions, ctx))
        where.append(_block_locator(target.block))
    if target.rows:
        parts.append(_row_arrays(target.rows, info, positions, ctx))
        where.append(lambda row, value: target.rows[row][value].pos)
    columns = parts[0] if len(parts) == 1 else [pa.concat_arrays(list(column)) for column in zip(*parts, strict=True)]
    data = pa.table(columns, schema=arrow_schema(info.columns, with_tbname=False))
    key = data.column(0)
    if key.null_count:  # the first NULL key, in the part it came from
        first = pc.index(pc.is_null(key), True).as_py()
        for part, locate in zip(parts, where, strict=True):
            if first < len(part[0]):
                pos = locate(first, positions.index(0))
                raise WriteRejectedError(
                    f"the primary key {info.primary_key} cannot be NULL", line=pos.line, column=pos.column
                )
            first -= len(part[0])
    return data


def _width_error(info: TableInfo, positions: list[int], got: int, pos: ast.Pos) -> WriteRejectedError:
    return WriteRejectedError(
        f"expected {len(positions)} value(s) for table {info.name}, got {got}", line=pos.line, column=pos.column
    )


def _row_arrays(
    rows: Sequence[Sequence[ast.Expr]], info: TableInfo, positions: list[int], ctx: ConstantContext
) -> list[pa.Array]:
    values: list[list[Any]] = [[None] * len(rows) for _ in info.columns]
    for r, row in enumerate(rows):
        if len(row) != len(positions):
            first = row[0].pos if row else ast.NO_POS
            raise _width_error(info, positions, len(row), first)
        for index, expr in zip(positions, row, strict=True):
            values[index][r] = typed_value(expr, info.columns[index], ctx)
    return [pa.array(column, arrow_type(col.type)) for column, col in zip(values, info.columns, strict=True)]


def _block_locator(block: ast.ValuesBlock) -> Callable[[int, int], ast.Pos]:
    def locate(row: int, value: int) -> ast.Pos:
        offset = literal_offset(block.text, block.width, row, value)
        newlines = block.text.count("\n", 0, offset)
        if not newlines:
            return ast.Pos(block.pos.line, block.pos.column + offset)
        return ast.Pos(block.pos.line + newlines, offset - block.text.rindex("\n", 0, offset))

    return locate


def _block_arrays(
    block: ast.ValuesBlock, info: TableInfo, positions: list[int], ctx: ConstantContext
) -> list[pa.Array]:
    locate = _block_locator(block)
    if block.width != len(positions):
        raise _width_error(info, positions, block.width, locate(0, 0))
    texts = block_columns(block.text, block.width)
    vectors = []
    for value, index in enumerate(positions):
        col = info.columns[index]
        literals = pa.array(texts[value], pa.string())
        vector = _vectorised(literals, col)
        if vector is None:
            vector = pa.array(
                [
                    _literal_value(text, col, ctx, lambda r, v=value: locate(r, v), r)
                    for r, text in enumerate(texts[value])
                ],
                arrow_type(col.type),
            )
        vectors.append(vector)
    return _in_table_order(info.columns, positions, vectors, len(texts[0]))


def _vectorised(literals: pa.Array, col: ast.ColumnDef) -> pa.Array | None:
    """The column read with Arrow's parsers when every literal is one whose reading is a plain
    parse of its text (the per-value rule would give the same value and no error); else None."""
    name = col.type.name
    nulls = pc.match_substring_regex(literals, _NULL)
    values = pc.if_else(nulls, pa.scalar(None, pa.string()), literals)

    def all_match(pattern: str) -> bool:
        return bool(pc.all(pc.or_(nulls, pc.match_substring_regex(literals, pattern))).as_py())

    bounds = value_range(col.type)
    if name == "TIMESTAMP" or (bounds is not None and name not in ("FLOAT", "DOUBLE")):
        if not all_match(_INTEGER):
            return None
        numbers = values.cast(pa.int64())
        extremes = pc.min_max(numbers)
        low, high = extremes["min"].as_py(), extremes["max"].as_py()
        assert bounds is not None
        if low is not None and (low < bounds[0] or high > bounds[1] or (name == "TIMESTAMP" and low < 0)):
            return None  # the per-value rule says which value and why (a negative epoch: per dialect)
        return numbers.cast(arrow_type(col.type))
    if name in ("FLOAT", "DOUBLE"):
        if not all_match(_DECIMAL):
            return None
        try:
            numbers = values.cast(pa.float64())
        except pa.ArrowInvalid:  # a spelling Arrow's parser does not take: the per-value rule
            return None
        assert bounds is not None
        largest = pc.max(pc.abs(numbers)).as_py()
        if largest is not None and not largest <= bounds[1]:  # beyond the type, or infinite
            return None
        return numbers.cast(arrow_type(col.type), safe=False)
    if name == "BOOL":
        if not all_match(_BOOLEAN):
            return None
        return pc.equal(pc.utf8_lower(values), "true")
    if name in STRING_TYPES:
        if not all_match(r"^['\"]"):
            return None
        body = pc.utf8_slice_codeunits(values, 1, -1)
        single = pc.starts_with(values, "'")
        text = pc.if_else(single, pc.replace_substring(body, "''", "'"), pc.replace_substring(body, '""', '"'))
        size = pc.binary_length(text) if name in ("BINARY", "VARCHAR") else pc.utf8_length(text)
        longest = pc.max(size).as_py()
        if col.type.length is not None and longest is not None and longest > col.type.length:
            return None
        return text
    return None


def _literal_value(
    text: str, col: ast.ColumnDef, ctx: ConstantContext, locate: Callable[[int], ast.Pos], row: int
) -> Any:
    """One block literal through the per-value rule, errors placed at the literal."""
    try:
        return typed_value(_literal(text), col, ctx)
    except TDStreamError as exc:
        pos = locate(row)
        raise exc.located(pos.line, pos.column) from None


def _literal(text: str) -> ast.Literal:
    """A block literal as the parser reads a lone literal value (no position: the caller
    places errors)."""
    head = text[0]
    if head in "'\"":
        return ast.Literal(text[1:-1].replace(head * 2, head), "string")
    upper = text.upper()
    if upper == "NULL":
        return ast.Literal(None, "null")
    if upper in ("TRUE", "FALSE"):
        return ast.Literal(upper == "TRUE", "bool")
    if "." in text or "e" in text or "E" in text:
        return ast.Literal(float(text), "float")
    return ast.Literal(int(text), "int")


def typed_value(expr: ast.Expr, col: ast.ColumnDef, ctx: ConstantContext) -> Any:
    """A written value (an INSERT value, a tag value) in the column's type, or the error at it."""
    first = _first_operand(expr)
    if col.type.name == "TIMESTAMP" and not ctx.negative_epochs and _is_negative_number(first):
        raise WriteRejectedError(
            f"invalid timestamp format for {col.name}: a negative epoch number (write a time before 1970 "
            "as a string, e.g. '1969-12-31 23:59:59')",
            line=first.pos.line or None,
            column=first.pos.column or None,
        )
    value = evaluate(expr, ctx, timestamp=col.type.name == "TIMESTAMP")
    try:
        return coerce(value, col.type, col.name)
    except ValueTypeError as exc:
        raise WriteRejectedError(str(exc), line=expr.pos.line or None, column=expr.pos.column or None) from None


def _first_operand(expr: ast.Expr) -> ast.Expr:
    """The leftmost operand of a value (``-1000`` of ``-1000 + 1s``): TDengine 3.x reads a time
    from its first token, which must be a number, a string or now."""
    while isinstance(expr, ast.Binary):
        expr = expr.left
    return expr


def _is_negative_number(expr: ast.Expr) -> bool:
    if isinstance(expr, ast.Unary):
        return expr.op == "-"
    return isinstance(expr, ast.Literal) and expr.kind in ("int", "float") and expr.value < 0  # type: ignore[operator]
