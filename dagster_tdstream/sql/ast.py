"""The parsed form of the TDengine dialect: frozen dataclasses with source positions.

Owns the shapes only (expressions, SELECT, DDL/DML, CREATE STREAM and stream management).
Nothing here validates, executes or translates; every node is immutable and hashable so
statements can be normalised, hashed (code versions) and shared between stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .timeunits import Duration


@dataclass(frozen=True)
class Pos:
    line: int
    column: int


NO_POS = Pos(0, 0)


# --------------------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Expr:
    pos: Pos = field(default=NO_POS, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True)
class Literal(Expr):
    """kind: int, float, string, bool, null."""

    value: object
    kind: str


@dataclass(frozen=True)
class DurationLiteral(Expr):
    duration: Duration


@dataclass(frozen=True)
class Column(Expr):
    """A column, tag or pseudo-column (``tbname``, ``_wstart``, ``_twend`` …) reference."""

    name: str
    table: str | None = None


@dataclass(frozen=True)
class Star(Expr):
    table: str | None = None


@dataclass(frozen=True)
class Placeholder(Expr):
    """``%%tbname``, ``%%trows`` or ``%%n`` (n ≥ 1)."""

    name: str


@dataclass(frozen=True)
class DataType:
    name: str  # upper case TDengine name, e.g. INT, BIGINT UNSIGNED, VARCHAR
    length: int | None = None
    scale: int | None = None

    def __str__(self) -> str:
        if self.length is None:
            return self.name
        if self.scale is not None:
            return f"{self.name}({self.length},{self.scale})"
        return f"{self.name}({self.length})"


@dataclass(frozen=True)
class Func(Expr):
    name: str  # lower case
    args: tuple[Expr, ...]
    distinct: bool = False


@dataclass(frozen=True)
class Cast(Expr):
    operand: Expr
    type: DataType


@dataclass(frozen=True)
class Unary(Expr):
    op: str  # '-', '+', 'NOT', '~'
    operand: Expr


@dataclass(frozen=True)
class Binary(Expr):
    op: str  # + - * / % & | = <> < <= > >= AND OR LIKE NOT LIKE MATCH NMATCH
    left: Expr
    right: Expr


@dataclass(frozen=True)
class IsNull(Expr):
    operand: Expr
    negated: bool


@dataclass(frozen=True)
class Between(Expr):
    operand: Expr
    low: Expr
    high: Expr
    negated: bool


@dataclass(frozen=True)
class InList(Expr):
    operand: Expr
    items: tuple[Expr, ...]
    negated: bool


@dataclass(frozen=True)
class Case(Expr):
    operand: Expr | None
    whens: tuple[tuple[Expr, Expr], ...]
    default: Expr | None


# --------------------------------------------------------------------------- SELECT


@dataclass(frozen=True)
class QualifiedName:
    name: str
    db: str | None = None
    pos: Pos = field(default=NO_POS, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.db}.{self.name}" if self.db else self.name


@dataclass(frozen=True)
class TableSource:
    table: QualifiedName
    alias: str | None = None


@dataclass(frozen=True)
class PlaceholderSource:
    """``FROM %%trows`` or ``FROM %%tbname`` inside a stream's query."""

    placeholder: Placeholder
    alias: str | None = None


@dataclass(frozen=True)
class SubquerySource:
    query: Select
    alias: str | None = None


@dataclass(frozen=True)
class Join:
    left: FromSource
    right: FromSource
    on: Expr | None
    kind: str = "INNER"


FromSource = TableSource | PlaceholderSource | SubquerySource | Join


@dataclass(frozen=True)
class SelectItem:
    expr: Expr
    alias: str | None
    text: str  # source text of the expression: TDengine names unaliased columns by it


@dataclass(frozen=True)
class Fill:
    mode: str  # NONE NULL VALUE PREV NEXT LINEAR NULL_F VALUE_F
    values: tuple[Expr, ...] = ()


@dataclass(frozen=True)
class IntervalWindow:
    interval: Duration
    offset: Duration | None = None
    sliding: Duration | None = None
    fill: Fill | None = None


@dataclass(frozen=True)
class SessionWindow:
    column: Column
    gap: Expr


@dataclass(frozen=True)
class StateWindow:
    expr: Expr
    true_for: Duration | None = None


@dataclass(frozen=True)
class EventWindow:
    start: tuple[Expr, ...]  # several conditions: ``START WITH (c1, c2)``
    end: tuple[Expr, ...]
    true_for: Duration | None = None


@dataclass(frozen=True)
class CountWindow:
    count: int
    sliding: int | None = None
    columns: tuple[Column, ...] = ()


QueryWindow = IntervalWindow | SessionWindow | StateWindow | EventWindow | CountWindow


@dataclass(frozen=True)
class Interp:
    """``RANGE(start[, end]) [EVERY(d)] [FILL(...)]``, the clause INTERP reads: the points in
    time it is computed at. A stream's INTERP has no RANGE (its points follow the data)."""

    start: Expr | None = None
    end: Expr | None = None
    every: Duration | None = None
    fill: Fill | None = None
    # set by a legacy INTERP stream's equivalent (never parsed): one point per trigger, at the
    # time this placeholder holds — ``_tcurrent_ts`` (a SLIDING point) or ``_tlocaltime`` (a
    # PERIOD tick). TDengine's 3.3.7 streams do not compute INTERP
    trigger_point: str | None = None
    pos: Pos = field(default=NO_POS, compare=False, repr=False)


@dataclass(frozen=True)
class OrderItem:
    expr: Expr
    descending: bool = False
    nulls_first: bool | None = None


@dataclass(frozen=True)
class Select:
    items: tuple[SelectItem, ...]
    source: FromSource | None
    where: Expr | None = None
    partition_by: tuple[Expr, ...] = ()
    window: QueryWindow | None = None
    group_by: tuple[Expr, ...] = ()
    having: Expr | None = None
    order_by: tuple[OrderItem, ...] = ()
    limit: int | None = None
    offset: int | None = None
    slimit: int | None = None
    soffset: int | None = None
    distinct: bool = False
    text: str = field(default="", compare=False, repr=False)
    pos: Pos = field(default=NO_POS, compare=False, repr=False)
    # ``PARTITION BY tbname AS t``: the names a legacy stream's SUBTABLE and TAGS refer to
    partition_aliases: tuple[str | None, ...] = ()
    # ``/*+ skip_tsma() */``: the hints' names, lower case
    hints: tuple[str, ...] = ()
    interp: Interp | None = None


# --------------------------------------------------------------------------- statements


@dataclass(frozen=True)
class Statement:
    pos: Pos = field(default=NO_POS, compare=False, repr=False, kw_only=True)
    text: str = field(default="", compare=False, repr=False, kw_only=True)


@dataclass(frozen=True)
class ColumnDef:
    name: str
    type: DataType
    primary_key: bool = False
    comment: str | None = None
    pos: Pos = field(default=NO_POS, compare=False, repr=False)

    @property
    def stored(self) -> str:
        """The column's name in its Delta table and in a query's data relation: its own, but
        for a data column named tbname (a legacy stream's ``select tbname``, as TDengine
        creates it), whose name a super table's child-table column already holds."""
        return STORED_TBNAME if self.name.lower() == "tbname" else self.name


STORED_TBNAME = "tbname#"


@dataclass(frozen=True)
class CreateDatabase(Statement):
    name: str
    if_not_exists: bool
    precision: str = "ms"
    keep: tuple[Duration, ...] = ()
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class MaintainDatabase(Statement):
    """``COMPACT DATABASE db``, ``TRIM DATABASE db`` or ``FLUSH DATABASE db`` (``action``:
    COMPACT | TRIM | FLUSH)."""

    action: str
    name: str


@dataclass(frozen=True)
class DropDatabase(Statement):
    name: str
    if_exists: bool
    force: bool = False


@dataclass(frozen=True)
class UseDatabase(Statement):
    name: str


@dataclass(frozen=True)
class CreateTable(Statement):
    """A super table (``tags`` non-empty or ``is_super``) or a normal table."""

    table: QualifiedName
    columns: tuple[ColumnDef, ...]
    tags: tuple[ColumnDef, ...]
    is_super: bool
    if_not_exists: bool
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ChildTableDef:
    table: QualifiedName
    stable: QualifiedName
    tag_names: tuple[str, ...] | None
    tag_values: tuple[Expr, ...]
    if_not_exists: bool


@dataclass(frozen=True)
class CreateChildTables(Statement):
    tables: tuple[ChildTableDef, ...]


@dataclass(frozen=True)
class ColumnRef:
    """``[db.]table.column``: where a virtual table's column reads its values."""

    db: str | None
    table: str
    column: str
    pos: Pos = field(default=NO_POS, compare=False, repr=False)


@dataclass(frozen=True)
class CreateVirtualTable(Statement):
    """``CREATE VTABLE``: a virtual normal table (``columns``, each with its source in
    ``refs`` or None) or, with ``using``, a virtual child table of a virtual super table
    (``refs`` named ``(column, source)`` or positional ``(None, source)`` in column order)."""

    table: QualifiedName
    if_not_exists: bool
    columns: tuple[ColumnDef, ...]
    refs: tuple[tuple[str | None, ColumnRef | None], ...]
    using: ChildTableDef | None = None


@dataclass(frozen=True)
class AlterVirtualColumn(Statement):
    """``ALTER VTABLE t ALTER COLUMN c SET {[db.]table.column | NULL}``: a column's source
    (None: the column reads NULL)."""

    table: QualifiedName
    column: str
    ref: ColumnRef | None
    column_pos: Pos = field(default=NO_POS, compare=False, repr=False)


@dataclass(frozen=True)
class DropVirtualTables(Statement):
    tables: tuple[QualifiedName, ...]
    if_exists: bool


@dataclass(frozen=True)
class DropTables(Statement):
    """``DROP {TABLE | STABLE} [IF EXISTS] names``, or ``… WITH db.`uid`, …`` (``by_uid``:
    each name is a table's uid, as ``ins_tables`` shows it)."""

    tables: tuple[QualifiedName, ...]
    if_exists: bool
    is_super: bool
    by_uid: bool = False


@dataclass(frozen=True)
class ValuesBlock:
    """Rows of plain literals kept as their text (``sql/values.py``): ``width`` literals per
    tuple; ``pos`` is where the first tuple starts."""

    text: str
    width: int
    pos: Pos = field(default=NO_POS, compare=False, repr=False)


@dataclass(frozen=True)
class InsertTarget:
    """One table's rows of an INSERT: ``block`` (if any) holds the leading run of plain-literal
    tuples, ``rows`` the tuples after it, in order."""

    table: QualifiedName
    using: ChildTableDef | None
    columns: tuple[str, ...] | None
    rows: tuple[tuple[Expr, ...], ...]
    pos: Pos = field(default=NO_POS, compare=False, repr=False)
    block: ValuesBlock | None = None


@dataclass(frozen=True)
class Insert(Statement):
    targets: tuple[InsertTarget, ...]


@dataclass(frozen=True)
class Delete(Statement):
    table: QualifiedName
    where: Expr | None


@dataclass(frozen=True)
class AlterTableSetTags(Statement):
    table: QualifiedName
    assignments: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True)
class AlterTags(Statement):
    """``ALTER {STABLE | TABLE} stb ADD TAG name type`` (``added``) or ``DROP TAG name``."""

    table: QualifiedName
    added: ColumnDef | None = None
    dropped: str | None = None


@dataclass(frozen=True)
class AlterLocal(Statement):
    """``ALTER LOCAL 'name' 'value'`` (or ``'name value'``): a client option of this session."""

    name: str
    value: str


@dataclass(frozen=True)
class AlterDnode(Statement):
    """``ALTER DNODE id 'name' 'value'`` or ``ALTER ALL DNODES …`` (``dnode`` None): a server
    option."""

    dnode: int | None
    name: str
    value: str


@dataclass(frozen=True)
class ShowVariables(Statement):
    """``SHOW VARIABLES`` (the cluster's options) or ``SHOW DNODE id VARIABLES`` [LIKE pattern]."""

    dnode: int | None
    like: str | None = None


@dataclass(frozen=True)
class Show(Statement):
    """SHOW DATABASES | STABLES | TABLES | STREAMS | TSMAS | [NORMAL | CHILD] VTABLES [in db]
    [LIKE pattern]."""

    what: str
    db: str | None = None
    like: str | None = None
    kind: str | None = None  # VTABLES: NORMAL or CHILD ones only


@dataclass(frozen=True)
class Describe(Statement):
    table: QualifiedName


@dataclass(frozen=True)
class Query(Statement):
    """A SELECT, or SELECTs joined by UNION [ALL]: then ORDER BY, LIMIT and OFFSET written
    after the last one order and cut the whole result (TDengine's grammar)."""

    select: Select
    unions: tuple[tuple[bool, Select], ...] = ()  # (ALL, the SELECT) after the first
    order_by: tuple[OrderItem, ...] = ()
    limit: int | None = None
    offset: int | None = None


# --------------------------------------------------------------------------- streams


@dataclass(frozen=True)
class PeriodTrigger:
    period: Duration
    offset: Duration | None = None
    kind: str = "PERIOD"


@dataclass(frozen=True)
class SlidingTrigger:
    """``[INTERVAL(i[, o])] SLIDING(s[, o])``; ``interval`` None is the plain SLIDING trigger."""

    sliding: Duration
    sliding_offset: Duration | None = None
    interval: Duration | None = None
    interval_offset: Duration | None = None

    @property
    def kind(self) -> str:
        return "INTERVAL" if self.interval is not None else "SLIDING"


@dataclass(frozen=True)
class SessionTrigger:
    column: Column
    gap: Duration
    kind: str = "SESSION"


@dataclass(frozen=True)
class StateTrigger:
    expr: Expr
    true_for: Duration | None = None
    kind: str = "STATE_WINDOW"


@dataclass(frozen=True)
class EventTrigger:
    start: tuple[Expr, ...]
    end: tuple[Expr, ...]
    true_for: Duration | None = None
    kind: str = "EVENT_WINDOW"


@dataclass(frozen=True)
class CountTrigger:
    count: int
    sliding: int | None = None
    columns: tuple[Column, ...] = ()
    kind: str = "COUNT_WINDOW"


Trigger = PeriodTrigger | SlidingTrigger | SessionTrigger | StateTrigger | EventTrigger | CountTrigger


@dataclass(frozen=True)
class StreamOption:
    """One of STREAM_OPTIONS(...): ``name`` upper case; ``duration``/``start``/``expr``/
    ``event_types``/``fill`` hold the argument of the options that take one."""

    name: str
    duration: Duration | None = None
    start: Literal | None = None
    expr: Expr | None = None
    event_types: tuple[str, ...] = ()
    fill: Fill | None = None
    pos: Pos = field(default=NO_POS, compare=False, repr=False)


# not a 3.3.7 option (its parser refuses it): the older statement families whose windows close
# by the wall clock (2.x continuous queries, the legacy FORCE_WINDOW_CLOSE) carry it in the
# CREATE STREAM they are equivalent to
FORCE_WINDOW_CLOSE = "FORCE_WINDOW_CLOSE"


@dataclass(frozen=True)
class Notification:
    urls: tuple[str, ...]
    on: tuple[str, ...] = ()
    where: Expr | None = None
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class OutputTag:
    name: str
    type: DataType
    expr: Expr
    comment: str | None = None


@dataclass(frozen=True)
class CreateStream(Statement):
    name: QualifiedName
    if_not_exists: bool
    trigger: Trigger
    trigger_table: QualifiedName | None
    partition_by: tuple[Expr, ...]
    options: tuple[StreamOption, ...]
    notification: Notification | None
    into: QualifiedName | None
    output_subtable: Expr | None
    columns: tuple[str, ...]
    composite_key: bool
    tags: tuple[OutputTag, ...]
    query: Select | None
    options_keyword: str = "STREAM_OPTIONS"  # or the older OPTIONS

    def option(self, name: str) -> StreamOption | None:
        for opt in self.options:
            if opt.name == name:
                return opt
        return None


# not a 3.3.7 option either: a 2.x continuous query computes for the first time this long
# after CREATE (2.x's client option streamCompStartDelay, 10 s); until then it has computed
# nothing, and SHOW STREAMS shows no exec time
FIRST_LAUNCH_DELAY = "FIRST_LAUNCH_DELAY"
# not a 3.3.7 option either: a 2.x continuous query whose WHERE bounds the primary key from
# above ends when every window up to that time (``start``: the last time a row may have) has
# been computed — 2.x closes the stream, which then leaves SHOW STREAMS
END_TIME = "END_TIME"
# not a 3.3.7 option either: the legacy TRIGGER AT_ONCE, every write computes the windows it
# touches (the engine's MAX_DELAY with no delay)
AT_ONCE = "AT_ONCE"
# the legacy streams' partitions: PARTITION BY ordinary columns and expressions as well as
# tbname and tags; each distinct value is a group with its own timeline, and a row whose
# update changes the value leaves its old group (which recalculates) for the new one
PARTITION_BY_VALUES = "PARTITION_BY_VALUES"
# the legacy streams' output: always a super table, tagged ``group_id`` (the group's id, 0
# without PARTITION BY) unless TAGS names the tags, created with the stream; a SUBTABLE name
# of a partitioned stream gets TDengine's ``_<stable>_<groupId>`` suffix
LEGACY_OUTPUT = "LEGACY_OUTPUT"
# the legacy COUNT_WINDOW (and a legacy stream without a window, each row its own count
# window) re-derives its windows on out-of-order rows, updates and deletes; 3.3.7's does not
RECALC_COUNT_WINDOW = "RECALC_COUNT_WINDOW"
# the legacy CONTINUOUS_WINDOW_CLOSE: a window closes when the stream's newest event time, over
# all its groups, passes its end (TDengine's task event time), not only its own group's
STREAM_EVENT_TIME = "STREAM_EVENT_TIME"
# the legacy CONTINUOUS_WINDOW_CLOSE [RECALCULATE t]: a row that lands in a window its own table
# has passed (or a delete) is recalculated at the next period of t (default 1h), not at once
RECALC_PERIOD = "RECALC_PERIOD"
# the legacy IGNORE EXPIRED 1 over a super table's rows: a row is expired when its own child
# table's newest event time has passed its window (TDengine's legacy engine tracks each table's)
TABLE_EXPIRY = "TABLE_EXPIRY"
# the legacy IGNORE UPDATE 1 (their default): a row written again at its timestamp is not an
# update but one more row, so a window's rows are the rows as written (``storage/written.py``
# keeps the ones a rewrite replaced in the table)
WRITTEN_ROWS = "WRITTEN_ROWS"
# the legacy streams' INTERVAL … FILL(mode): the windows of a group without rows are written
# too (3.3.7 fills inside its query instead; ``compute/fill.py``)
LEGACY_FILL = "LEGACY_FILL"
# a window that recalculation shows gone (merged, split, too short) or left without rows loses
# its output row: the legacy streams delete such results, and a TSMA's states must stay equal
# to the raw rows. A 3.3.7 stream keeps the rows it wrote ("重算时输出表中已经产生的计算结果不会被删除")
RETRACT_WINDOWS = "RETRACT_WINDOWS"


@dataclass(frozen=True)
class LegacyTag:
    """A tag of a legacy stream's output super table: its value is the PARTITION BY
    expression of the same alias (or at the same position)."""

    name: str
    type: DataType | None  # None: the type of the PARTITION BY column it takes its value from
    comment: str | None = None
    pos: Pos = field(default=NO_POS, compare=False, repr=False)


@dataclass(frozen=True)
class CreateLegacyStream(Statement):
    """TDengine 3.0–3.3.6: ``CREATE STREAM s [TRIGGER …] [WATERMARK t] [IGNORE EXPIRED 0|1]
    [DELETE_MARK t] [FILL_HISTORY 0|1 [ASYNC]] [IGNORE UPDATE 0|1] [INTO stb [(cols)]
    [TAGS (…)] [SUBTABLE(expr)]] AS SELECT … window_clause [NOTIFY …]``: the window lives in
    the SELECT, the options are words."""

    name: QualifiedName
    if_not_exists: bool
    trigger: str  # AT_ONCE WINDOW_CLOSE MAX_DELAY FORCE_WINDOW_CLOSE CONTINUOUS_WINDOW_CLOSE
    max_delay: Duration | None
    recalculate: Duration | None
    watermark: Duration | None
    ignore_expired: bool
    delete_mark: Duration | None
    fill_history: bool
    ignore_update: bool
    into: QualifiedName | None
    columns: tuple[str, ...]
    key_column: int | None  # the column list position marked PRIMARY/COMPOSITE KEY
    tags: tuple[LegacyTag, ...]
    subtable: Expr | None
    query: Select
    notification: Notification | None
    option_pos: dict[str, Pos] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class CreateSnode(Statement):
    """``CREATE SNODE ON DNODE n``: legacy streams ran on a stream node."""

    dnode: int


@dataclass(frozen=True)
class CreateContinuousQuery(Statement):
    """TDengine 2.x: ``CREATE TABLE [IF NOT EXISTS] res AS SELECT … INTERVAL(i) [SLIDING(s)]``,
    a continuous query writing each window into ``res`` once the window is over."""

    table: QualifiedName
    if_not_exists: bool
    query: Select


@dataclass(frozen=True)
class TsmaFunction:
    """One function of a TSMA's list: ``name`` (lower case) of the plain column ``column``."""

    name: str
    column: str
    pos: Pos = field(default=NO_POS, compare=False, repr=False)


@dataclass(frozen=True)
class CreateTsma(Statement):
    """``CREATE [RECURSIVE] TSMA name ON [db.]table FUNCTION(f(col), …) INTERVAL(d)``; a
    recursive TSMA names the TSMA it is built on as ``table`` and has no ``functions``."""

    name: QualifiedName
    table: QualifiedName
    functions: tuple[TsmaFunction, ...]
    interval: Duration
    recursive: bool
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropTsma(Statement):
    name: QualifiedName
    if_exists: bool = False


@dataclass(frozen=True)
class CreateFunction(Statement):
    """``CREATE [OR REPLACE] [AGGREGATE] FUNCTION [IF NOT EXISTS] name AS 'path' OUTPUTTYPE type
    [BUFSIZE n] [LANGUAGE 'C' | 'Python']``: a user-defined function (UDF)."""

    name: str
    path: str
    output_type: DataType
    aggregate: bool = False
    or_replace: bool = False
    if_not_exists: bool = False
    bufsize: int = 0
    language: str = "C"  # as TDengine spells it: C or Python


@dataclass(frozen=True)
class DropFunction(Statement):
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class KillStream(Statement):
    """TDengine 2.x: ``KILL STREAM id`` stops a continuous query. 2.x ids are
    ``connId:streamId``; here the stream part is the number SHOW STREAMS shows (there are no
    connections: any connection part is accepted), and the query's name (its result table)
    works too."""

    name: QualifiedName | None
    stream_id: int | None = None


@dataclass(frozen=True)
class DropStream(Statement):
    name: QualifiedName
    if_exists: bool


@dataclass(frozen=True)
class StartStream(Statement):
    name: QualifiedName
    if_exists: bool
    ignore_untreated: bool


@dataclass(frozen=True)
class StopStream(Statement):
    name: QualifiedName
    if_exists: bool


@dataclass(frozen=True)
class RecalculateStream(Statement):
    name: QualifiedName
    start: Expr
    end: Expr | None
