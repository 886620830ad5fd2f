"""A subscription: the rows written to a table since the consumer's progress, from its WAL.

Owns the 2.x subscription contract over the Delta versions of one table (normal, child or
super): the first consume returns the rows in the table (from the start time, filtered),
each later consume the rows inserted or updated since — in commit order, a row updated
twice returned twice, deletions not returned — and the progress (the last WAL offset
consumed) is the client's: saved in its progress file after every consume, resumed from it
(``restart=False``), deleted on ``close(keep_progress=False)``. Reads the warehouse only;
writes nothing but the client's progress file (atomically: the old progress or the new).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SubscriptionError
from ..sql import ast
from ..sql.constants import ConstantContext
from ..sql.continuous_query import fold_time_bounds
from ..storage import vfeed
from ..storage.catalog import TableInfo
from ..storage.warehouse import Warehouse
from ..triggers.conditions import holds

_CHANGES = ("insert", "update_postimage")


@dataclass(frozen=True)
class SubscriptionSpec:
    """What is consumed: the table, the columns returned (None: all, tags of a super or
    child table and ``tbname`` included), a row condition and a start time (table precision)."""

    table: TableInfo
    columns: tuple[str, ...] | None = None
    condition: ast.Expr | None = None
    start: int | None = None

    @property
    def table_key(self) -> str:
        return f"{self.table.db}.{self.table.name}"


class Subscription:
    def __init__(
        self,
        warehouse: Warehouse,
        spec: SubscriptionSpec,
        *,
        progress_file: Path | None = None,
        restart: bool = False,
        interval_ms: int = 1000,
    ) -> None:
        self.warehouse = warehouse
        self.spec = spec
        self.progress_file = progress_file
        self.interval_ms = interval_ms
        self.version: int | None = None  # the last WAL offset consumed (None: nothing yet)
        if progress_file is not None and progress_file.exists() and not restart:
            saved = json.loads(progress_file.read_text())
            if saved.get("table") != spec.table_key:
                raise SubscriptionError(
                    f"progress file {progress_file} belongs to a subscription of {saved.get('table')}, "
                    f"not {spec.table_key}"
                )
            self.version = int(saved["version"])

    def consume(self, *, commit: bool = True) -> list[dict[str, Any]]:
        """The rows written since the last consume (all rows, the first time). The progress
        file is updated before they are returned; with ``commit=False`` only when the caller
        calls ``commit()`` after handling them (a crash in between hands them over again
        instead of losing them)."""
        table = self.spec.table
        current = vfeed.newest_version(self.warehouse, table)
        if self.version is None:
            rows = self._snapshot(current)
        elif current > self.version:
            rows = rows_in_offsets(self.warehouse, self.spec, self.version + 1, current)
        else:
            rows = []
        self.version = current if self.version is None else max(current, self.version)
        if commit:
            self.commit()
        return rows

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Rows as they arrive, polling every ``interval_ms``: the caller decides when to stop."""
        while True:
            started = time.monotonic()
            yield from self.consume()
            time.sleep(max(0.0, self.interval_ms / 1000 - (time.monotonic() - started)))

    def close(self, *, keep_progress: bool = True) -> None:
        """Unsubscribe; without ``keep_progress`` the saved progress is deleted, so the next
        subscription of the topic starts from the beginning again."""
        if not keep_progress and self.progress_file is not None and self.progress_file.exists():
            self.progress_file.unlink()

    def commit(self) -> None:
        """Save the progress of the rows consumed so far."""
        if self.progress_file is None:
            return
        self.progress_file.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.progress_file.with_suffix(".tmp")
        temporary.write_text(json.dumps({"table": self.spec.table_key, "version": self.version}))
        os.replace(temporary, self.progress_file)  # a crash leaves the old progress or the new, never half

    def _snapshot(self, version: int) -> list[dict[str, Any]]:
        data = self.warehouse.read_table(self.spec.table, version) if version >= 0 else None
        if data is None or data.num_rows == 0:
            return []
        pk = self.spec.table.primary_key
        return _Feed(self.warehouse, self.spec).select(sorted(data.to_pylist(), key=lambda r: r[pk]))


def rows_in_offsets(warehouse: Warehouse, spec: SubscriptionSpec, first: int, last: int) -> list[dict[str, Any]]:
    """The rows inserted or updated in WAL offsets [first, last] of the spec's table, in
    commit order, selected as the spec says (the same offsets always give the same rows)."""
    return _Feed(warehouse, spec).rows(first, last)


class _Feed:
    def __init__(self, warehouse: Warehouse, spec: SubscriptionSpec) -> None:
        self.warehouse = warehouse
        self.spec = spec

    def rows(self, first: int, last: int) -> list[dict[str, Any]]:
        table = self.spec.table
        try:
            feed = self.warehouse.delta.change_feed(table.db, table.storage_name, first, last)
        except Exception as exc:  # delta-rs: the versions' change data was vacuumed or compacted
            raise SubscriptionError(
                f"the progress of this subscription (WAL offset {first - 1} of {self.spec.table_key}) is older than "
                f"the WAL the table retains ({exc}); subscribe again with restart to start from the table's rows"
            ) from None
        records = [r for r in feed.to_pylist() if r["_change_type"] in _CHANGES]
        pk = table.primary_key
        records.sort(key=lambda r: (r["_commit_version"], r[pk]))
        if table.kind != "normal":
            records = self._with_tags(records)
        for record in records:
            for name in ("_change_type", "_commit_version", "_commit_timestamp"):
                record.pop(name, None)
        return self.select(records)

    def _with_tags(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        table = self.spec.table
        if table.kind == "child":
            records = [r for r in records if r.get("tbname") == table.name]
            children = {table.name: table}
        else:
            children = {c.name: c for c in self.warehouse.catalog.child_tables(table.db, table.name)}
        kept = []
        for record in records:
            child = children.get(record.get("tbname"))
            if child is not None:  # a row of a child table dropped since is gone
                kept.append({**record, **child.tag_values})
        return kept

    def select(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        spec = self.spec
        pk = spec.table.primary_key
        rows, returned = [], self._returned()
        for record in records:
            if spec.start is not None and record[pk] < spec.start:
                continue
            if spec.condition is not None and not holds(spec.condition, record):
                continue
            rows.append({name: record.get(key) for name, key in returned})
        return rows

    def _returned(self) -> list[tuple[str, str]]:
        """Each returned column's name and the record key holding it. A data column named
        ``tbname`` (a legacy stream's output) is stored as ``tbname#``: ``*`` returns it under
        its name and leaves out the child table's name, while a named ``tbname`` is the
        pseudo-column, as in a query."""
        table = self.spec.table
        if self.spec.columns is not None:
            stored = {c.name.lower(): c.stored for c in table.columns}
            return [(name, name if name == "tbname" else stored.get(name, name)) for name in self.spec.columns]
        names = [(c.name, c.stored) for c in table.columns]
        if table.kind != "normal":
            names += [(t.name, t.name) for t in table.tags]
            if all(c.name.lower() != "tbname" for c in table.columns):
                names.append(("tbname", "tbname"))
        return names


def subscription_spec(
    select: ast.Select, table: TableInfo, ctx: ConstantContext, start: int | None
) -> SubscriptionSpec:
    """The subscription a 2.x subscription SELECT describes: ``SELECT * | columns FROM t
    [WHERE condition]`` (time bounds such as ``ts > now - 1h`` are taken at subscribe time)."""
    if not isinstance(select.source, ast.TableSource):
        raise SubscriptionError("a subscription reads one table or super table: SELECT … FROM t [WHERE …]")
    if select.window is not None or select.group_by or select.partition_by or select.order_by:
        raise SubscriptionError("a subscription SELECT has no window, grouping or ordering: it returns rows")
    known = {c.name for c in (*table.columns, *table.tags)} | {"tbname"}
    columns: list[str] | None = []
    for item in select.items:
        if isinstance(item.expr, ast.Star):
            columns = None
            break
        if not isinstance(item.expr, ast.Column) or item.expr.name.lower() not in known:
            raise SubscriptionError(f"a subscription returns columns of {table.name}: {item.text!r} is not one")
        columns.append(item.expr.name.lower())  # type: ignore[union-attr]
    condition = None
    if select.where is not None:
        keys = frozenset({table.primary_key, "_c0", "_rowts"})
        condition = fold_time_bounds(select.where, ctx, keys)
    return SubscriptionSpec(table, tuple(columns) if columns is not None else None, condition, start)
