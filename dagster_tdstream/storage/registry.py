"""The stream registry as the runtime sees it: a registered stream resolved against the catalog.

Owns turning a registry row (the CREATE STREAM text) into a ``StreamDefinition``: the parsed
statement, the trigger table, the precision that timestamps use, the group columns and the
output table's name. Reads only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

from ..errors import CatalogError
from ..sql import ast, tsma
from ..sql.constants import ConstantContext
from ..sql.continuous_query import equivalent_stream
from ..sql.legacy_stream import equivalent_stream as legacy_equivalent
from ..sql.parser import parse_statement
from ..sql.text import expr_text
from ..sql.timeunits import parse_timestamp, resolve_timezone
from .catalog import StreamInfo, TableInfo
from .warehouse import Warehouse


@dataclass(frozen=True)
class StreamDefinition:
    info: StreamInfo
    stmt: ast.CreateStream
    trigger_table: TableInfo | None
    precision: str
    # the trigger table was dropped after the stream was created: TDengine keeps such a
    # stream (dropping a trigger table is "ignored"), it just has nothing to read
    trigger_missing: str | None = None
    # how the user wrote it: a 3.3.7 ``stream``, a 2.x ``continuous_query`` or a 3.0–3.3.6
    # ``legacy_stream`` (``stmt`` is then the CREATE STREAM it is equivalent to)
    family: str = "stream"

    @property
    def key(self) -> str:
        return self.info.key

    @property
    def db(self) -> str:
        return self.info.db

    @property
    def name(self) -> str:
        return self.info.name

    @cached_property
    def group_columns(self) -> tuple[str, ...]:
        """The PARTITION BY names: tbname, tags and (legacy) columns by their name, a legacy
        PARTITION BY expression as TDengine names its value, ``_group_key(expr)`` (no column
        is named so; ``group_exprs`` computes it)."""
        return tuple(
            e.name.lower() if isinstance(e, ast.Column) else f"_group_key({expr_text(e).lower()})"
            for e in self.stmt.partition_by
        )

    @cached_property
    def group_exprs(self) -> dict[str, ast.Expr]:
        """The computed group columns: name → the PARTITION BY expression (legacy streams)."""
        return {
            name: e
            for name, e in zip(self.group_columns, self.stmt.partition_by, strict=True)
            if not isinstance(e, ast.Column)
        }

    def group_expr_type(self, name: str) -> ast.DataType:
        """A PARTITION BY expression's value type: DOUBLE for arithmetic and numeric CASTs (as
        TDengine computes them), a string otherwise (concat, CAST to a string type)."""
        expr = self.group_exprs[name]
        if isinstance(expr, ast.Cast):
            return expr.type
        numeric = isinstance(expr, ast.Binary | ast.Unary) or (isinstance(expr, ast.Literal) and expr.kind != "string")
        return ast.DataType("DOUBLE") if numeric else ast.DataType("VARCHAR", 256)

    @property
    def fills_history(self) -> bool:
        """FILL_HISTORY or FILL_HISTORY_FIRST: the data written before the stream is computed."""
        return any(self.stmt.option(name) is not None for name in ("FILL_HISTORY", "FILL_HISTORY_FIRST"))

    @cached_property
    def history_start(self) -> int | None:
        """FILL_HISTORY[_FIRST](start): rows before it never trigger (in the table's precision;
        a string is read in the time zone of the session that created the stream)."""
        for name in ("FILL_HISTORY", "FILL_HISTORY_FIRST"):
            option = self.stmt.option(name)
            if option is not None and option.start is not None:
                if option.start.kind == "int":
                    return int(option.start.value)  # type: ignore[call-overload]
                zone = resolve_timezone(self.info.timezone)
                return parse_timestamp(str(option.start.value), self.precision, zone)
        return None

    @property
    def output(self) -> tuple[str, str] | None:
        """(db, table) of the output table, None for notify-only streams."""
        into = self.stmt.into
        if into is None or self.stmt.option("CALC_NOTIFY_ONLY") is not None:
            return None
        return ((into.db or self.db).lower(), into.name.lower())


@lru_cache(maxsize=1024)
def _parsed(sql: str) -> ast.Statement:
    """A registered statement parsed once per process (parsed statements are frozen): every
    sensor tick and every run resolves its streams again, and parsing them was 3% of the
    client's time in a conformance scenario."""
    return parse_statement(sql)


def resolve_stream(warehouse: Warehouse, info: StreamInfo) -> StreamDefinition:
    written = _parsed(info.sql)
    if isinstance(written, ast.CreateTsma):
        return _tsma_stream(warehouse, info, written)
    if not isinstance(written, ast.CreateStream | ast.CreateContinuousQuery | ast.CreateLegacyStream):
        raise CatalogError(f"registry entry {info.key} is not a CREATE STREAM statement")  # pragma: no cover
    named = written.trigger_table if isinstance(written, ast.CreateStream) else _source_of(written.query)
    trigger_table = None
    precision = warehouse.database(info.db).precision
    missing = None
    if named is not None:
        db = (named.db or info.db).lower()
        name = named.name.lower()
        trigger_table = warehouse.find_table(db, name) if warehouse.catalog.get_database(db) else None
        if trigger_table is None:
            missing = f"{db}.{name}"
        else:
            precision = warehouse.database(db).precision
    stmt, family = written, "stream"
    if isinstance(written, ast.CreateContinuousQuery):
        # a continuous query runs as the stream it is equivalent to; ``now`` in its WHERE is
        # the moment it was created
        ctx = ConstantContext(precision, resolve_timezone(info.timezone), info.created_at * 10**6)
        keys = frozenset({"_c0", "_rowts", trigger_table.primary_key if trigger_table is not None else "ts"})
        stmt, family = equivalent_stream(written, ctx, keys), "continuous_query"
    elif isinstance(written, ast.CreateLegacyStream):
        # a legacy stream runs as the 3.3.7 stream it is equivalent to
        key = trigger_table.primary_key if trigger_table is not None else "ts"
        types = {}
        if trigger_table is not None:
            types = {c.name.lower(): c.type for c in (*trigger_table.columns, *trigger_table.tags)}
        stmt, family = legacy_equivalent(written, key, types, _existing_tags(warehouse, info, written)), "legacy_stream"
    return StreamDefinition(info, stmt, trigger_table, precision, missing, family)


def _existing_tags(warehouse: Warehouse, info: StreamInfo, written: ast.CreateLegacyStream) -> dict[str, ast.DataType]:
    """The tags of the super table a legacy stream writes, if it exists: TAGS may name them
    without types."""
    into = written.into
    if into is None:
        return {}
    into_db = (into.db or info.db).lower()
    if warehouse.catalog.get_database(into_db) is None:
        return {}
    output = warehouse.find_table(into_db, into.name.lower())
    return {t.name: t.type for t in output.tags} if output is not None else {}


def tsma_root(warehouse: Warehouse, info: StreamInfo) -> tuple[ast.CreateTsma, list[ast.CreateTsma]]:
    """A TSMA's statement and the chain of statements down to the TSMA on the table itself
    (a recursive TSMA keeps the functions of its base, and that base's)."""
    written = _parsed(info.sql)
    assert isinstance(written, ast.CreateTsma)
    chain = [written]
    while chain[-1].recursive:
        base = chain[-1].table
        base_info = warehouse.catalog.get_stream((base.db or info.db).lower(), base.name.lower())
        if base_info is None:
            raise CatalogError(f"TSMA {info.key} is built on {base.db or info.db}.{base.name}, which does not exist")
        parsed = _parsed(base_info.sql)
        assert isinstance(parsed, ast.CreateTsma)
        chain.append(parsed)
    return written, chain


def _tsma_stream(warehouse: Warehouse, info: StreamInfo, written: ast.CreateTsma) -> StreamDefinition:
    """A TSMA runs as the stream that keeps its intermediate states (``sql/tsma.py``): over the
    table, or over the states of the TSMA it is built on. The output's tags are the ones it was
    created with (a tag added to the table later is not in it)."""
    _, chain = tsma_root(warehouse, info)
    if written.recursive:
        base = written.table
        source_db, source = (base.db or info.db).lower(), base.name.lower() + tsma.OUTPUT_SUFFIX
    else:
        source_db, source = (written.table.db or info.db).lower(), written.table.name.lower()
    trigger_table = warehouse.find_table(source_db, source) if warehouse.catalog.get_database(source_db) else None
    output = warehouse.find_table(info.db, info.name + tsma.OUTPUT_SUFFIX)
    tags_of = output if output is not None else trigger_table
    tags = tuple(tags_of.tags) if tags_of is not None else ()
    sql = tsma.stream_sql(
        info.name,
        info.db,
        f"`{source_db}`.`{source}`",
        written.interval,
        tags,
        tsma.states(chain[-1].functions),
        written.recursive,
        trigger_table.primary_key if trigger_table is not None else "ts",
    )
    stmt = _parsed(sql)
    assert isinstance(stmt, ast.CreateStream)
    # a window whose rows are all deleted must leave the states, or queries would read them
    stmt = replace(stmt, options=(*stmt.options, ast.StreamOption(ast.RETRACT_WINDOWS)))
    precision = warehouse.database(info.db).precision
    missing = None if trigger_table is not None else f"{source_db}.{source}"
    return StreamDefinition(info, stmt, trigger_table, precision, missing, "tsma")


def _source_of(query: ast.Select) -> ast.QualifiedName:
    source = query.source
    assert isinstance(source, ast.TableSource)  # the family's rules ran at CREATE
    return source.table


def load_streams(warehouse: Warehouse) -> list[StreamDefinition]:
    return [resolve_stream(warehouse, info) for info in warehouse.catalog.list_streams()]


def load_stream(warehouse: Warehouse, key: str) -> StreamDefinition:
    db, _, name = key.partition(".")
    info = warehouse.catalog.get_stream(db, name)
    if info is None:
        raise CatalogError(f"stream {key} does not exist")
    return resolve_stream(warehouse, info)
