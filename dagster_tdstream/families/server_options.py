"""TDengine's server options this engine reads: ``ALTER DNODE id 'name' 'value'``,
``ALTER ALL DNODES …``, ``SHOW VARIABLES`` and ``SHOW DNODE id VARIABLES``.

Owns the options' names (as TDengine spells them, case-insensitive), their defaults and
ranges, and keeping them in the catalog's settings, where they outlive the session and hold
for every client of the warehouse (as a dnode's configuration does). The warehouse is one
dnode, id 1. Does not touch tables, streams or Dagster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from ..errors import CatalogError, QueryError
from ..results import Result
from ..sql import ast
from ..sql.text import show_like

if TYPE_CHECKING:
    from ..storage.warehouse import Warehouse

DNODE_ID = 1  # the warehouse is one dnode
_PREFIX = "dnode."


@dataclass(frozen=True)
class _Option:
    name: str  # as TDengine spells it
    default: int
    low: int
    high: int


# maxTsmaNum: how many TSMAs may exist. TDengine 3.3.7's taosd defaults it to 10 (range 0-10,
# tglobal.c); the TSMA page of the spec still gives 3, the value of the 3.3.2 release that
# introduced TSMAs and of its tests' configuration (tsma.py sets it to 3 explicitly).
_OPTIONS = {option.name.lower(): option for option in (_Option("maxTsmaNum", 10, 0, 10),)}


def max_tsma_num(warehouse: Warehouse) -> int:
    return _value(warehouse, _OPTIONS["maxtsmanum"])


def _value(warehouse: Warehouse, option: _Option) -> int:
    stored = warehouse.catalog.settings(_PREFIX + option.name).get(_PREFIX + option.name)
    return option.default if stored is None else int(stored)


def _check_dnode(stmt: ast.AlterDnode | ast.ShowVariables) -> None:
    """The statement names the one dnode (or all of them)."""
    if stmt.dnode is not None and stmt.dnode != DNODE_ID:
        raise CatalogError(
            f"Dnode does not exist: dnode {stmt.dnode} (the warehouse is dnode {DNODE_ID})",
            line=stmt.pos.line or None,
            column=stmt.pos.column or None,
        )


def alter(warehouse: Warehouse, stmt: ast.AlterDnode) -> Result:
    """Set a server option on the one dnode; a clear error for another dnode, an option this
    engine does not read, or a value out of range — nothing is changed then."""
    _check_dnode(stmt)
    where = {"line": stmt.pos.line or None, "column": stmt.pos.column or None}
    option = _OPTIONS.get(stmt.name.lower())
    if option is None:
        known = ", ".join(o.name for o in _OPTIONS.values())
        raise QueryError(f"Invalid config option: {stmt.name!r}; the server options read here are {known}", **where)
    value = stmt.value.strip()
    if not value.isdigit() or not option.low <= int(value) <= option.high:
        raise QueryError(
            f"Invalid config option value: {option.name} is a whole number from {option.low} to {option.high}, "
            f"got {stmt.value!r}",
            **where,
        )
    warehouse.catalog.put_settings({_PREFIX + option.name: str(int(value))})
    return Result(message=f"{option.name} set to {int(value)}")


def show(warehouse: Warehouse, stmt: ast.ShowVariables) -> Result:
    """The server options with their values; SHOW DNODE id VARIABLES adds the dnode's id."""
    _check_dnode(stmt)
    options = [o for o in _OPTIONS.values() if stmt.like is None or show_like(o.name, stmt.like)]
    columns: dict[str, pa.Array] = {}
    if stmt.dnode is not None:
        columns["dnode_id"] = pa.array([DNODE_ID] * len(options), pa.int32())
    columns["name"] = pa.array([o.name for o in options], pa.string())
    columns["value"] = pa.array([str(_value(warehouse, o)) for o in options], pa.string())
    columns["scope"] = pa.array(["server"] * len(options), pa.string())
    table = pa.table(columns)
    return Result(table=table, message=f"Query OK, {table.num_rows} row(s) in set")
