"""Error classes shared by every stage.

Owns the exception hierarchy and how an error renders as one line for the CLI
(``error at line L, column C: …``). It must not import any other package module:
every stage raises these, so they sit at the bottom of the dependency graph.
"""

from __future__ import annotations


class TDStreamError(Exception):
    """Base class: a user-facing error with an optional source position."""

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        statement: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.statement = statement
        self.hint = hint

    def located(self, line: int, column: int, statement: str | None = None) -> TDStreamError:
        """Attach a position if the error does not carry one yet (errors raised deep in
        the executor know the statement only through the caller)."""
        if self.line is None:
            self.line, self.column = line, column
        if self.statement is None:
            self.statement = statement
        return self

    def __str__(self) -> str:
        text = self.message
        if self.hint:
            text = f"{text} ({self.hint})"
        if self.line is not None:
            return f"error at line {self.line}, column {self.column}: {text}"
        return f"error: {text}"


class SqlSyntaxError(TDStreamError):
    """The text does not follow the grammar."""


class StreamValidationError(TDStreamError):
    """The statement parses but breaks a semantic rule (units, ranges, option combinations)."""


class CatalogError(TDStreamError):
    """A database, table, column or stream does not exist, or already exists."""


class UnknownDatabaseError(CatalogError):
    """No database is selected, or the one a statement names does not exist (TDengine's
    "Database not specified" and "Database not exist")."""


class WriteRejectedError(TDStreamError):
    """An INSERT/DELETE/ALTER was rejected whole; no table changed."""


class QueryError(TDStreamError):
    """A query could not be translated or executed."""


class SparkUnavailableError(TDStreamError):
    """The Spark endpoint cannot be reached, or the local Spark Connect server cannot start."""


class SubscriptionError(TDStreamError):
    """A subscription cannot continue: a missing table, or progress the WAL no longer holds."""
