"""What a translation works with: the public results (``TranslatedQuery``, ``OutputColumn``,
``RowWindowPlan``), what the caller passes in (``SourceTable``, ``StreamScope``,
``TranslationContext``), and the data side of one query (``Scope``: the FROM relation and its
columns as ``d.<name>``). No SQL is rendered here.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from ...errors import QueryError
from .. import ast
from ..rowwindows import QueryRowWindow


@dataclass(frozen=True)
class SourceTable:
    """What the translator needs to know of a table: its view name and schema."""

    key: str  # db.name
    view: str
    kind: str  # super | child | normal
    columns: tuple[ast.ColumnDef, ...]
    tags: tuple[ast.ColumnDef, ...]
    precision: str
    # a TSMA's view of the table (compute/tsma_states.py): each row is one window's
    # intermediate states or one raw row as its own, in these columns (``sum_c1`` …) instead
    # of the columns; aggregates merge them
    states: frozenset[str] = frozenset()
    tsma: str | None = None  # the TSMA it reads (db.name)


@dataclass(frozen=True)
class OutputColumn:
    name: str
    is_timestamp: bool
    kind: str = "other"  # the translator's kind (ts, int, float, string, bool …), for outer queries


@dataclass(frozen=True)
class RowWindowPlan:
    """A view the caller registers before running the query: the rows of ``source_sql``
    (``__ts``, the partition keys, the values the trigger reads) labelled with the row windows
    of ``window`` — ``compute/query.py`` runs the trigger engine over each partition."""

    view: str
    source_sql: str
    partition: tuple[str, ...]
    window: QueryRowWindow
    values: tuple[str, ...]  # the columns the window's trigger reads
    gap: int | None  # SESSION's gap, in the table's precision
    true_for: int | None


@dataclass(frozen=True)
class SpanWidth:
    """A constant of a batch: the widest span ``high - low`` of the triggers in ``view`` (SQL
    over its rows as ``__trig``), at least 1 — a range join's bucket width."""

    view: str
    low: str
    high: str

    @property
    def sql(self) -> str:
        return f"SELECT greatest(max({self.high} - {self.low}), 1) FROM {quote_ident(self.view)} __trig"


@dataclass(frozen=True)
class KeyAggregates:
    """The aggregate-first plan's data side as a query of its own (``StreamScope.aggregates_view``):
    the data grouped by the keys it meets its triggers on — ``__k0`` … as the trigger columns
    ``keys`` name them (``__g1`` …, ``_twstart``) — with the query's aggregates and each key's
    rows as a run (``__first``, ``__last``, ``__rows``: what deriving INTERVAL windows reads).
    ``narrowed``: the query's WHERE keeps fewer rows than the trigger saw, so the runs are not
    the trigger's. ``select`` and ``having``: the query's output columns and HAVING over one
    row of it (``d``) and its trigger's columns (``__trig``), for a run whose triggers are
    its keys' rows themselves (``compute/window_job.py``)."""

    sql: str
    keys: tuple[str, ...]
    narrowed: bool
    select: tuple[str, ...] = ()
    having: str | None = None


@dataclass(frozen=True)
class TranslatedQuery:
    sql: str
    columns: tuple[OutputColumn, ...]
    precision: str
    tables: tuple[SourceTable, ...]
    row_windows: tuple[RowWindowPlan, ...] = ()  # registered in this order (inner queries first)
    # (placeholder in ``sql``, its value's definition): evaluated and substituted first
    parameters: tuple[tuple[str, SpanWidth], ...] = ()
    # the data sides ``sql`` reads from ``StreamScope.aggregates_view``, to be computed first
    key_aggregates: tuple[KeyAggregates, ...] = ()


@dataclass(frozen=True)
class StreamScope:
    """What a stream's query sees of its triggers: a view with one row per trigger
    (``__tid``, ``_twstart``, ``_twend``, ``_twduration``, ``_twrownum``, ``_tgrpid``,
    ``_tlocaltime``, ``__tbname`` and the group values ``__g1`` … ``__gN``), the trigger table
    behind ``%%trows``/``%%tbname``, and how a trigger-table row matches a group."""

    triggers_view: str
    trigger_table: SourceTable | None
    group_columns: tuple[str, ...]  # PARTITION BY names (tbname or tags), lower case
    window_label: Callable[[str], str] | None  # SQL labelling a row with its trigger window start
    # PRE_FILTER: %%trows are the rows that entered the trigger
    trows_filter: ast.Expr | None = None
    point_rows: bool = False  # SLIDING points: %%trows are the rows after the previous point
    rows_by_trigger: bool = False  # PERIOD: the trigger table view carries each row's __tid
    # FORCE_OUTPUT: a trigger without result rows still writes one (constants and
    # placeholders filled, other columns NULL); otherwise such triggers write nothing
    force_output: bool = False
    # the trigger table narrowed to the batch's time span, read by %%trows (a run scans the
    # rows its windows cover, not the table's whole history); %%tbname reads the full table
    trows_view: str | None = None
    # a legacy PARTITION BY expression: its group column's name (in ``group_columns``) → the
    # expression, computed over the trigger table's rows to meet each row's group
    group_exprs: Mapping[str, ast.Expr] = field(default_factory=dict)
    # a view the caller computes before the triggers exist (a history run derives them from
    # its runs): the aggregate-first plan on equalities reads its data side from there
    # (``KeyAggregates``) instead of computing it in the query
    aggregates_view: str | None = None
    # more aggregates over the rows (``d``) that view's query computes per key, as
    # ``expr AS name`` (a STATE_WINDOW island's state)
    aggregates_measures: tuple[str, ...] = ()


@dataclass(frozen=True)
class UserFunctionRef:
    """A user-defined function (``CREATE FUNCTION``) as the translator sees it: ``bind`` makes
    it callable for arguments of the given kinds and returns its name in Spark SQL."""

    name: str
    aggregate: bool
    kind: str  # of its OUTPUTTYPE
    language: str  # C or Python
    bind: Callable[[Sequence[str]], str]


@dataclass
class TranslationContext:
    """``resolve`` turns a table name into a SourceTable (raising CatalogError when unknown);
    ``stream`` is set when translating a stream's query for a batch of triggers."""

    resolve: Callable[[ast.QualifiedName], SourceTable]
    timezone: ZoneInfo
    now_ns: int | None = None
    stream: StreamScope | None = None
    row_windows: list[RowWindowPlan] = field(default_factory=list)
    parameters: list[tuple[str, SpanWidth]] = field(default_factory=list)
    key_aggregates: list[KeyAggregates] = field(default_factory=list)
    # the catalog's user-defined functions by name (None: the query can name none)
    functions: Callable[[str], UserFunctionRef | None] | None = None
    _names: itertools.count = field(default_factory=itertools.count)

    def fresh(self, prefix: str) -> str:
        return f"__{prefix}{next(self._names)}"

    def parameter(self, value: SpanWidth) -> str:
        """A placeholder for ``value``, which the caller evaluates and substitutes before
        running the query."""
        name = f"__parameter{len(self.parameters)}__"
        self.parameters.append((name, value))
        return name


@dataclass(frozen=True)
class Typed:
    sql: str
    kind: str  # ts, int, float, string, bool, null, duration, other
    aggregate: bool = False


@dataclass
class Scope:
    """The data side of a query: ``base`` is the FROM relation; its columns are referenced
    through the derived table ``d`` built over it (``d.<name>``)."""

    base: str | None
    columns: dict[str, tuple[str, str]]  # lower name (or side.name in a join) → (column of d, kind)
    star: list[tuple[str, str]]  # what `*` expands to: (output name, key of columns)
    pk: str | None  # the primary timestamp, as a column of d
    precision: str
    tables: tuple[SourceTable, ...] = ()
    trigger_join: list[str] = field(default_factory=list)  # ON conditions tying d to __trig
    trows_label: str | None = None  # SQL labelling base rows with their trigger window
    window: ast.QueryWindow | None = None
    window_sql: dict[str, str] = field(default_factory=dict)
    labelled: bool = False  # base is a row-window view: already the data relation, WHERE applied
    # window-function columns other row-wise functions read (``expr AS name`` over ``d``),
    # each a layer of its own: Spark does not nest window functions
    layers: list[str] = field(default_factory=list)
    # each row's neighbours in its timeline (``expr AS name`` over ``d``, computed before the
    # window labels explode rows, among the rows ``row_filter`` keeps): twa's interpolation
    neighbours: list[str] = field(default_factory=list)
    row_filter: str | None = None
    timeline: list[str] = field(default_factory=list)  # PARTITION BY and GROUP BY keys: a timeline each
    ambiguous: set[str] = field(default_factory=set)  # joined columns that need their side's name
    states: frozenset[str] = frozenset()  # SourceTable.states: aggregates merge these columns


def kind_of(dtype: ast.DataType) -> str:
    name = dtype.name
    if name == "TIMESTAMP":
        return "ts"
    if "INT" in name:
        return "int"
    if name in ("FLOAT", "DOUBLE", "DECIMAL"):
        return "float"
    if name == "BOOL":
        return "bool"
    if name in ("VARCHAR", "BINARY", "NCHAR", "JSON"):
        return "string"
    return "other"


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def quote_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


_DATA_REFERENCE = re.compile(r"\bd\.(`(?:[^`]|``)+`|\w+)")


def data_references(sql: str) -> list[str]:
    """The columns of the data relation ``d`` that rendered SQL reads (``d.`v``` → ```v```)."""
    return _DATA_REFERENCE.findall(sql)


def query_error(message: str, node: ast.Expr | ast.Select | None = None) -> QueryError:
    pos = getattr(node, "pos", None)
    if pos is not None and pos.line:
        return QueryError(message, line=pos.line, column=pos.column)
    return QueryError(message)


# trigger placeholders → (column of the triggers view, kind)
TRIGGER_NAMES: dict[str, tuple[str, str]] = {
    "_twstart": ("_twstart", "ts"),
    "_twend": ("_twend", "ts"),
    "_twduration": ("_twduration", "int"),
    "_twrownum": ("_twrownum", "int"),
    "_tgrpid": ("_tgrpid", "int"),
    "_tlocaltime": ("_tlocaltime", "int"),
    "_tprev_localtime": ("_tprev_localtime", "int"),
    "_tnext_localtime": ("_tnext_localtime", "int"),
    "_tcurrent_ts": ("_tcurrent_ts", "ts"),
    "_tprev_ts": ("_tprev_ts", "ts"),
    "_tnext_ts": ("_tnext_ts", "ts"),
}


WINDOW_PSEUDO = ("_wstart", "_wend", "_wduration")
INTERP_PSEUDO = ("_irowts", "_isfilled", "_irowts_origin")


def output_name(item: ast.SelectItem) -> str:
    """TDengine names an unaliased column by its text, a qualified column (``a.ts``) by the
    column's name alone."""
    if item.alias:
        return item.alias
    if isinstance(item.expr, ast.Column) and item.expr.table is not None:
        return item.expr.name
    return item.text
