"""Reading warehouse tables into Spark.

Owns how a table becomes a Spark DataFrame: the Delta snapshot's Parquet files
(``DeltaTable.file_uris()``) read with the schema from the catalog (by Spark, or here when they
are local and hold few rows), the companion tag rows
joined on ``tbname`` for super and child tables, a constant ``tbname`` for normal tables.
Views are registered under names the query translator chose. Must not write anything.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from ..errors import UnknownDatabaseError
from ..sql.ast import QualifiedName
from ..sql.translate import SourceTable
from .catalog import TableInfo, check_virtual_source, sources_by_table
from .delta import is_local, local_path
from .system import SYSTEM_DB, system_schema, system_table
from .types import arrow_schema, arrow_type
from .warehouse import Warehouse

IN_LIST_LIMIT = 10_000  # child tables named in a filter; more are semi-joined
FILE_ROWS = 50_000  # rows of this process handed to Spark as a Parquet file from this many
SPARK_ROWS_DIR = "_spark_rows"  # in a local warehouse: those files, while a query reads them
# A local read of at most this many rows (by the files' statistics) is read here and handed to
# Spark in the plan: Spark sets up a reader per Parquet file (a Hadoop job context, the footer,
# the record reader), 13% of the server's time in a stream run over a batch's few rows spread
# over small files; rows in the plan cost it nothing to open.
CLIENT_READ_ROWS = 10_000


def spark_type(arrow: pa.DataType) -> Any:
    from pyspark.sql import types as T

    if pa.types.is_int64(arrow):
        return T.LongType()
    if pa.types.is_int32(arrow):
        return T.IntegerType()
    if pa.types.is_int16(arrow):
        return T.ShortType()
    if pa.types.is_int8(arrow):
        return T.ByteType()
    if pa.types.is_float32(arrow):
        return T.FloatType()
    if pa.types.is_float64(arrow):
        return T.DoubleType()
    if pa.types.is_boolean(arrow):
        return T.BooleanType()
    if pa.types.is_string(arrow):
        return T.StringType()
    if pa.types.is_binary(arrow):
        return T.BinaryType()
    if pa.types.is_decimal(arrow):
        return T.DecimalType(arrow.precision, arrow.scale)
    raise TypeError(f"no Spark type for {arrow}")


def spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, spark_type(f.type), True) for f in schema])


def table_frame(
    spark: Any,
    warehouse: Warehouse,
    info: TableInfo,
    version: int | None = None,
    key_range: tuple[int, int] | None = None,
    *,
    tags: bool = True,
    used: frozenset[str] | None = None,
    storage: str | None = None,
    children: bool = True,
) -> Any:
    """The rows of a table as Spark sees them in a query: data columns, ``tbname``, tags (as
    of the WAL offset ``version`` when given, e.g. a stream's history); with ``key_range``
    only the rows whose primary timestamp lies in [low, high], read from the files that may
    hold them. ``tags=False``: a reader that needs no tag gets the same rows without them.
    ``used``: the columns the query names (a virtual table's rows depend on them).
    ``storage``: rows of the table kept in another Delta table of its shape (``written.py``).
    ``children=False`` (with ``tags=False``): a super table's rows of every ``tbname`` its
    files hold, for a reader that groups by ``tbname`` and keeps the groups of existing child
    tables after (``live_children``): a test per group instead of one per row, a fifth of an
    aggregation's time over 10 M rows."""
    from pyspark.sql import functions as F

    if info.virtual and version is None and storage is None:
        return virtual_frame(spark, warehouse, info, key_range, tags=tags, used=used)
    # as of a WAL offset a virtual table is read from its feed (``vfeed.py``), which stores it
    is_super = info.kind != "normal"  # a child's rows live in its super table's storage
    arrow_fields = arrow_schema(info.columns, with_tbname=is_super)
    schema = spark_schema(arrow_fields)
    pk = info.primary_key
    files, rows = warehouse.delta.files_and_rows(
        info.db,
        storage or info.storage_name,
        version,
        key_range=None if key_range is None else (pk, *key_range),
        equals=("tbname", info.name) if info.kind == "child" else None,
    )
    if files and rows is not None and rows <= CLIENT_READ_ROWS and is_local(warehouse.uri):
        # the catalog's schema, as Spark's reader applies it: a file older than a column added
        # since gives NULL there
        data = spark.createDataFrame(pads.dataset(files, format="parquet", schema=arrow_fields).to_table(), schema)
    else:
        data = spark.read.schema(schema).parquet(*files) if files else spark.createDataFrame([], schema)
    if key_range is not None:
        data = data.where((F.col(pk) >= key_range[0]) & (F.col(pk) <= key_range[1]))
    if not is_super:
        return data.withColumn("tbname", F.lit(info.name))
    if info.kind == "child":
        data = data.where(F.col("tbname") == info.name)
    if tags:
        return with_tags(spark, warehouse, info, data)
    return live_children(spark, warehouse, info, data, "tbname") if children else data


def virtual_frame(
    spark: Any,
    warehouse: Warehouse,
    info: TableInfo,
    key_range: tuple[int, int] | None,
    *,
    tags: bool,
    used: frozenset[str] | None,
) -> Any:
    """A virtual table's rows: its sources' rows joined on the timestamp (full outer: the
    union of their timestamps, NULL where a source has no row), each column read from its
    source, a column without one NULL. Only the sources of the columns the query names
    (``used``; all when it names none, as ``count(*)``) give timestamps, as in TDengine. A
    source dropped since gives nothing. A virtual super table: its child tables' rows."""
    from functools import reduce

    from pyspark.sql import functions as F

    if info.kind == "super":
        children = warehouse.catalog.child_tables(info.db, info.name)
        frames = [virtual_frame(spark, warehouse, child, key_range, tags=tags, used=used) for child in children]
        if frames:
            return reduce(lambda a, b: a.unionByName(b), frames)
        fields = arrow_schema(info.columns, with_tbname=True)
        if tags:
            fields = pa.schema([*fields, *(pa.field(t.name, arrow_type(t.type)) for t in info.tags)])
        return spark.createDataFrame([], spark_schema(fields))
    pk, refs = info.primary_key, info.refs or {}
    sourced = [c for c in info.columns[1:] if c.name in refs]
    read = [c for c in sourced if used is None or c.name in used] or sourced
    frames = []
    for (db, table), pairs in sources_by_table(info, read).items():
        source = warehouse.find_table(db, table)
        if source is None or source.virtual:
            continue  # dropped since (TDengine: its columns read nothing, even once recreated)
        check_virtual_source(info, pairs, source)
        rows = table_frame(spark, warehouse, source, key_range=key_range, tags=False)
        frames.append(rows.select(F.col(source.primary_key).alias(pk), *(F.col(s).alias(c.name) for c, s in pairs)))
    if frames:
        data = reduce(lambda a, b: a.join(b, on=pk, how="full_outer"), frames)
    else:
        data = spark.createDataFrame([], spark_schema(arrow_schema(info.columns[:1], with_tbname=False)))
    present = set(data.columns)
    data = data.select(
        F.col(pk),
        *(
            F.col(c.name) if c.name in present else F.lit(None).cast(spark_type(arrow_type(c.type))).alias(c.name)
            for c in info.columns[1:]
        ),
    ).withColumn("tbname", F.lit(info.name))
    return with_tags(spark, warehouse, info, data) if info.kind == "child" and tags else data


def live_child_names(warehouse: Warehouse, info: TableInfo) -> list[str] | None:
    """The existing child tables of a super table, by name (None for a child table: its rows
    are all its own)."""
    if info.kind == "child":
        return None
    return list(warehouse.catalog.child_uids(info.db, info.name))


def live_children(spark: Any, warehouse: Warehouse, info: TableInfo, data: Any, column: str) -> Any:
    """The rows of ``data`` whose ``column`` names an existing child table of ``info`` (a
    dropped child's rows may outlive it in an older version or a crash before its delete):
    what ``with_tags`` keeps, without joining the tags — half the cost of a scan. By name list
    up to ``IN_LIST_LIMIT`` children, beyond that by a broadcast semi-join (the names would
    swell the plan)."""
    from pyspark.sql import functions as F

    names = live_child_names(warehouse, info)
    if names is None:
        return data
    if len(names) <= IN_LIST_LIMIT:
        return data.where(F.col(column).isin(names) if names else F.lit(False))
    children = spark.createDataFrame(pa.table({column: pa.array(names, pa.string())}))
    return data.join(F.broadcast(children), column, "left_semi")


def with_tags(spark: Any, warehouse: Warehouse, info: TableInfo, data: Any) -> Any:
    """Rows of a super or child table (with ``tbname``) joined to their child table's tags."""
    from pyspark.sql import functions as F

    children = [info] if info.kind == "child" else warehouse.catalog.child_tables(info.db, info.name)
    tag_fields = [pa.field("tbname", pa.string())] + [pa.field(t.name, arrow_type(t.type)) for t in info.tags]
    tag_rows = [tuple([child.name] + [child.tag_values.get(t.name) for t in info.tags]) for child in children]
    tags = spark.createDataFrame(tag_rows, spark_schema(pa.schema(tag_fields)))
    # broadcast: the tag rows are one per child table, far smaller than the data
    return data.join(F.broadcast(tags), "tbname", "inner")


class SparkViews:
    """Temporary Spark views of warehouse tables for one query or one stream run: each table
    is registered once, under a name unique to this object, and dropped by ``close``.

    A table's view is registered only when SQL run through ``sql`` names it:
    registering makes Spark list and stat every file of the table, a second for a table of
    hundreds of files, which a stream run whose query reads only its batch's rows
    (``table_range``) must not pay for the whole trigger table."""

    _counter = itertools.count()

    def __init__(
        self,
        spark: Any,
        warehouse: Warehouse,
        default_db: str | None,
        floors: dict[str, tuple[int, int]] | None = None,
        used: frozenset[str] | None = None,
    ) -> None:
        self.spark = spark
        self.used = used  # the columns the query names: a virtual table's rows depend on them
        # db.table → (primary timestamp below which the query reads none of its rows, the
        # version it reads): a last-row query proven to need only the newest (compute/newest.py)
        self.floors = floors or {}
        self.warehouse = warehouse
        self.default_db = default_db
        self._views: dict[str, SourceTable] = {}
        self._pending: dict[str, Callable[[], Any]] = {}  # view → its frame, not registered yet
        self._registered: list[str] = []
        self._files: list[Path] = []  # rows handed to Spark as Parquet, removed by ``close``
        self._rows: dict[str, pa.Table] = {}  # view → the rows of this process it holds

    def resolve(self, name: QualifiedName) -> SourceTable:
        db = (name.db or self.default_db or "").lower()
        if not db:
            raise UnknownDatabaseError("no database selected: USE a database or qualify the name as db.table")
        if db == SYSTEM_DB:
            return self._system(name.name.lower())
        return self.table(self.warehouse.table(db, name.name.lower()))

    def _system(self, name: str) -> SourceTable:
        key = f"{SYSTEM_DB}.{name}"
        if key not in self._views:
            schema = system_schema(name)
            data = system_table(self.warehouse, name)
            frame = (
                self.spark.createDataFrame(data.to_pylist(), spark_schema(data.schema))
                if data.num_rows
                else (self.spark.createDataFrame([], spark_schema(data.schema)))
            )
            view = f"__tds_{next(self._counter)}"
            from pyspark.sql import functions as F

            self._create(frame.withColumn("tbname", F.lit(name)), view)
            self._views[key] = SourceTable(key, view, "normal", schema, (), "ms")
        return self._views[key]

    def table(self, info: TableInfo) -> SourceTable:
        key = f"{info.db}.{info.name}"
        if key not in self._views:
            view = f"__tds_{next(self._counter)}"
            floor, version = self.floors.get(key, (None, None))
            key_range = None if floor is None else (floor, 2**63 - 1)
            self._pending[view] = lambda: table_frame(
                self.spark, self.warehouse, info, version, key_range, used=self.used
            )
            precision = self.warehouse.database(info.db).precision
            self._views[key] = SourceTable(key, view, info.kind, info.columns, info.tags, precision)
        return self._views[key]

    def read_as(self, info: TableInfo, source: SourceTable, frame: Callable[[], Any]) -> None:
        """Resolve ``info`` to ``source``, a view whose rows ``frame`` builds when SQL first
        names it (a TSMA's states standing in for the table's rows)."""
        self._views[f"{info.db}.{info.name}"] = source
        self._pending[source.view] = frame

    def fresh_view(self) -> str:
        return f"__tds_{next(self._counter)}"

    def table_range(self, info: TableInfo, low: int, high: int, *, tags: bool = True) -> str:
        """A view of the table's rows with primary timestamps in [low, high] (registered now);
        ``tags=False``: without their tag columns."""
        frame = table_frame(self.spark, self.warehouse, info, key_range=(low, high), tags=tags)
        return self.register(frame, "range")

    def sql(self, text: str) -> Any:
        """``spark.sql`` once the views the text names are registered."""
        for view in [v for v in self._pending if re.search(rf"\b{v}\b", text)]:
            self._create(self._pending.pop(view)(), view)
        return self.spark.sql(text)

    def register(self, frame: Any, prefix: str) -> str:
        """Register any DataFrame (e.g. the triggers of a run) and return its view name."""
        return self.register_as(frame, f"__{prefix}_{next(self._counter)}")

    def register_rows(self, rows: pa.Table, prefix: str, view: str | None = None) -> str:
        """Register rows of this process (e.g. a run's triggers) as a view (named ``view``,
        when a translation chose the name before the rows existed)."""
        frame = self.rows_frame(rows, prefix)
        view = self.register(frame, prefix) if view is None else self.register_as(frame, view)
        self._rows[view] = rows
        return view

    def rows_of(self, view: str) -> pa.Table | None:
        """The rows of this process a view holds (``register_rows``), None for other views."""
        return self._rows.get(view)

    def rows_frame(self, rows: pa.Table, prefix: str = "rows") -> Any:
        """Rows of this process as a DataFrame. Many rows go to Spark as a Parquet file in a
        local warehouse, which it reads like a table: handed over in the query plan, 833,000
        rows cost Spark Connect 4 s to take in, as a file 0.2 s."""
        schema = spark_schema(rows.schema)
        if rows.num_rows < FILE_ROWS or not is_local(self.warehouse.uri):
            return self.spark.createDataFrame(rows, schema)
        folder = local_path(self.warehouse.uri) / SPARK_ROWS_DIR
        folder.mkdir(exist_ok=True)
        path = folder / f"{prefix}-{uuid.uuid4().hex}.parquet"
        self._files.append(path)
        pq.write_table(rows, path)
        return self.spark.read.schema(schema).parquet(str(path))

    def register_as(self, frame: Any, view: str) -> str:
        """Register a DataFrame under a name the query translator chose."""
        self._create(frame, view)
        self._views[view] = SourceTable(view, view, "view", (), (), "ms")
        return view

    def _create(self, frame: Any, view: str) -> None:
        frame.createOrReplaceTempView(view)
        self._registered.append(view)

    def sources(self) -> list[SourceTable]:
        return list(self._views.values())

    def close(self) -> None:
        for view in self._registered:
            self.spark.catalog.dropTempView(view)
        self._registered.clear()
        self._views.clear()
        self._rows.clear()
        self._pending.clear()
        for path in self._files:
            path.unlink(missing_ok=True)
        self._files.clear()
