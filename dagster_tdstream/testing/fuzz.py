"""A grammar-aware fuzzer for ``Session.execute``: what no input may do.

Owns generating mutated statements (seeded, so a failure replays) from a seed corpus — the
project's conformance statements and statements of every kind over a small schema — and
running them against a real warehouse, recording each defect: an exception that is not a
``TDStreamError`` (a crash), a statement that runs past the time limit (a hang), and a rejected
statement after which a table or the catalog differs (a partial write). Used by the test
command at a small size and by ``bench/fuzz.py`` at 10,000 statements. Never touches a
warehouse it did not create.
"""

from __future__ import annotations

import random
import re
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compute.spark import LazySpark
from ..errors import TDStreamError
from ..session import Session
from ..storage.warehouse import Warehouse

SETUP = (
    "create database d; use d;"
    "create stable st (ts timestamp, v int, f float, x double, s varchar(16), b bool) tags (g int, t varchar(8));"
    "create table c1 using st tags (1, 'a'); create table c2 using st tags (2, 'b');"
    "create table nt (ts timestamp, a int, n nchar(8));"
    "insert into c1 values (1700000000000, 1, 1.5, 2.5, 'x', true) (1700000001000, 2, 2.5, 3.5, 'y', false)"
    " c2 values (1700000000000, 3, 0.5, 1.0, 'z', true) nt values (1700000000000, 7, 'n')"
)

# statements of every kind over the schema above; the corpus's own CREATE STREAMs are added
SEEDS = (
    "insert into c1 values (1700000002000, 5, 1.25, 2.0, 'abc', true)",
    "insert into c3 using st tags (3, 'c') values (now, 1, 1, 1, 'q', false) nt values (now + 1s, 2, 'm')",
    "insert into nt (ts, a) values ('2023-11-15 06:13:20.000', 9)",
    "delete from c1 where ts >= 1700000001000 and v < 10",
    "delete from nt where a in (1, 2, 7) or ts between 0 and 10",
    "alter table c1 set tag g = 5",
    "alter table st add column y bigint",
    "create table if not exists c4 using st tags (4, 'd')",
    "create database if not exists e vgroups 2 precision 'us' keep 3650",
    "drop table if exists c2",
    "show tables",
    "show d.streams",
    "describe st",
    "select count(*), sum(v), max(f) from st where ts > now - 100d partition by tbname",
    "select _wstart, avg(x), last(s) from c1 interval(10s) sliding(5s) fill(prev)",
    "select ts, v + 1, cast(v as bigint) * 2 from c1 where v between 1 and 3 order by ts desc limit 2",
    "select tbname, g, first(v) from st group by tbname, g",
    "create stream s1 interval(10s) sliding(10s) from st partition by tbname into o1 as "
    "select _twstart ts, count(*) n, sum(v) from %%trows",
    "create stream s2 state_window(v) from c1 stream_options(max_delay(5s)) into o2 as "
    "select _twstart, _twend, count(*) from %%trows",
    "create stream s3 period(10s) into o3 as select cast(_tlocaltime / 1000000 as timestamp) ts, count(*) from st",
    "drop stream if exists s1",
)

BOUNDARY_LITERALS = (
    "1e309",
    "-1e309",
    "99999999999999999999",
    "-9223372036854775809",
    "2147483648",
    "0",
    "-1",
    "1e-10",
    "NULL",
    "''",
    "'" + "x" * 5000 + "'",
    "now - 1e20",
    "'2023-02-30 25:61:61'",
    "0x7fffffff",
    "true",
    "'nan'",
)

_TOKEN = re.compile(r"'(?:[^']|'')*'|\"[^\"]*\"|`[^`]*`|%%\w+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?\w*|\w+|[^\s\w]")


@dataclass
class FuzzReport:
    statements: int = 0
    accepted: int = 0
    rejected: int = 0
    crashes: list[str] = field(default_factory=list)  # "statement → exception"
    hangs: list[str] = field(default_factory=list)
    partial_writes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def defects(self) -> list[str]:
        return [*self.crashes, *self.hangs, *self.partial_writes]


def mutations(corpus: list[str], seed: int) -> Iterator[str]:
    """An endless, reproducible stream of mutated statements."""
    rng = random.Random(seed)
    while True:
        tokens = _TOKEN.findall(rng.choice(corpus))
        # one statement in ten unchanged, so that the warehouse keeps changing too
        for _ in range(rng.choice((0, 1, 1, 1, 1, 1, 1, 2, 2, 3))):
            tokens = _mutate(tokens, rng)
        yield " ".join(tokens)


def _mutate(tokens: list[str], rng: random.Random) -> list[str]:
    if not tokens:
        return tokens
    i = rng.randrange(len(tokens))
    # values at their limits get past the parser into typing and storage: weigh them most
    kind = rng.choices(range(8), weights=(10, 10, 10, 40, 7, 7, 8, 8))[0]
    if kind == 0:  # delete a token
        return tokens[:i] + tokens[i + 1 :]
    if kind == 1:  # duplicate one
        return tokens[: i + 1] + tokens[i:]
    if kind == 2 and len(tokens) > 1:  # swap two neighbours
        j = min(i + 1, len(tokens) - 1)
        tokens = list(tokens)
        tokens[i], tokens[j] = tokens[j], tokens[i]
        return tokens
    if kind == 3:  # a boundary literal where a literal or a name was
        literals = [k for k, t in enumerate(tokens) if t[0].isdigit() or t[0] == "'" or t.isalnum()]
        k = rng.choice(literals) if literals else i
        return [*tokens[:k], rng.choice(BOUNDARY_LITERALS), *tokens[k + 1 :]]
    if kind == 4:  # deep nesting around a literal
        depth = rng.choice((10, 40, 200, 2000))
        return [*tokens[:i], "(" * depth + "1" + ")" * depth, *tokens[i + 1 :]]
    if kind == 5:  # a long operator chain
        terms = rng.choice((50, 150, 1000))
        return [*tokens[:i], " + ".join(["v"] * terms), *tokens[i + 1 :]]
    if kind == 6:  # a token of another statement kind
        other = rng.choice(("select", "from", ",", "(", ")", ";", "*", "%%trows", "interval"))
        return [*tokens[:i], other, *tokens[i:]]
    return tokens[:i] + [rng.choice(("-", "not", "~", "+"))] * rng.choice((1, 50, 1000)) + tokens[i:]


def snapshot(warehouse: Warehouse) -> tuple[Any, ...]:
    """What a statement could change: databases, tables with their Delta versions, schemas
    and tags, and streams."""
    catalog = warehouse.catalog
    tables = []
    for db in catalog.list_databases():
        for info in catalog.list_tables(db.name, ["super", "child", "normal"]):
            version = warehouse.delta.version(db.name, info.storage_name) if info.kind != "child" else None
            columns = tuple((c.name, str(c.type)) for c in (*info.columns, *info.tags))
            tables.append((db.name, info.name, info.kind, version, columns, sorted(info.tag_values.items(), key=str)))
    streams = sorted(s.key for s in catalog.list_streams())
    return tuple(db.name for db in catalog.list_databases()), tuple(tables), tuple(streams)


def run_fuzz(
    count: int,
    *,
    seed: int = 0,
    spark: Any = None,
    corpus_files: tuple[Path, ...] = (),
    setup_files: tuple[Path, ...] = (),
    hang_seconds: float = 60.0,
    progress: Callable[[int, FuzzReport], None] | None = None,
) -> FuzzReport:
    """Execute ``count`` mutated statements; a fresh warehouse whenever database d is gone.
    ``setup_files`` create what the statements of ``corpus_files`` refer to."""
    corpus = list(SEEDS) * 4  # the corpus files are mostly CREATE STREAM: keep every kind frequent
    for path in corpus_files:
        corpus += [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("--")]
    report = FuzzReport()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tdstream-fuzz-") as tmp:
        setup = [SETUP, *(path.read_text() for path in setup_files)]
        warehouse, session = _fresh(Path(tmp), 0, spark, setup)
        for n, statement in zip(range(count), mutations(corpus, seed), strict=False):
            if warehouse.catalog.get_database("d") is None:
                warehouse.close()
                warehouse, session = _fresh(Path(tmp), n, spark, setup)
            before = snapshot(warehouse)
            outcome = _execute(session, statement, hang_seconds)
            report.statements += 1
            if outcome == "accepted":
                report.accepted += 1
            elif outcome == "rejected":
                report.rejected += 1
                if snapshot(warehouse) != before:
                    report.partial_writes.append(statement[:300])
            elif outcome == "hang":
                report.hangs.append(statement[:300])
                break  # the hung statement still holds the session
            else:
                report.crashes.append(f"{statement[:300]} → {outcome}")
            if progress is not None:
                progress(n, report)
        warehouse.close()
    report.seconds = time.monotonic() - started
    return report


def _fresh(tmp: Path, n: int, spark: Any, setup: list[str]) -> tuple[Warehouse, Session]:
    warehouse = Warehouse(str(tmp / f"warehouse-{n}"))
    session = Session(warehouse, timezone="UTC", spark=LazySpark(session=spark))
    for script in setup:
        session.execute(script)
    session.execute("use d")
    return warehouse, session


def _execute(session: Session, statement: str, hang_seconds: float) -> str:
    """ "accepted", "rejected", "hang", or the crash's last traceback line."""
    outcome: list[str] = []

    def target() -> None:
        try:
            session.execute(statement)
            outcome.append("accepted")
        except TDStreamError:
            outcome.append("rejected")
        except BaseException as exc:  # the defect being looked for: anything else escaping
            outcome.append(f"{type(exc).__name__}: {exc} @ {traceback.extract_tb(exc.__traceback__)[-1]}"[:500])

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(hang_seconds)
    return outcome[0] if outcome else "hang"
