"""``tdstream shell``: an interactive SQL prompt, the way TDengine users work in ``taos``.

Owns reading statements line by line (a statement ends at a top-level ``;``, so it may span
lines; quotes and comments are respected), the shell's own commands (``source FILE``,
``help``, ``quit``), printing results as aligned tables with a ``taos``-style summary, and the
prompt history. A failing statement prints one line and the shell goes on. Executes through
``Session``; must not touch storage or Dagster itself.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..errors import SqlSyntaxError, TDStreamError
from ..session import Session
from ..sql.timeunits import TimeValueError
from ..sql.tokens import tokenize

PROMPT = "tdstream> "
CONTINUATION = "       -> "
HELP = """Statements end with ';' and may span lines. Shell commands:
  source FILE   run the statements of a SQL file
  help          this text
  quit, exit    leave the shell (Ctrl-D too)"""


def statement_complete(text: str) -> bool:
    """Whether ``text`` ends a statement: its last token is a top-level ``;`` (an open quote
    or a ``;`` inside a string or comment does not count)."""
    try:
        tokens = tokenize(text)
    except SqlSyntaxError as exc:
        return "unterminated" not in str(exc)  # other errors: complete, let the parser say it
    return bool(tokens) and tokens[-1].is_op(";")


class Shell:
    """Reads lines from ``read(prompt)`` until it returns None; writes with ``write``."""

    def __init__(self, session: Session, write: Callable[[str], None]) -> None:
        self.session = session
        self.write = write

    def run(self, read: Callable[[str], str | None]) -> None:
        for script in self._statements(read):
            if not self._command(script):
                return

    def _statements(self, read: Callable[[str], str | None]) -> Iterator[str]:
        buffer: list[str] = []
        while True:
            line = read(CONTINUATION if buffer else PROMPT)
            if line is None:
                return
            if not buffer and _shell_word(line) is not None:
                yield line.strip()  # shell commands need no ';'
                continue
            buffer.append(line)
            text = "\n".join(buffer)
            if text.strip() and statement_complete(text):
                buffer = []
                yield text

    def _command(self, script: str) -> bool:
        """Run one input; False when the shell should end."""
        word = _shell_word(script)
        if word in ("quit", "exit"):
            return False
        if word == "help":
            self.write(HELP)
            return True
        if word == "source":
            path = script.strip().rstrip(";").split(None, 1)[1:]
            if not path:
                self.write("error: source needs a file: source FILE")
                return True
            try:
                text = Path(path[0].strip().strip("'\"")).read_text()
            except OSError as exc:
                self.write(f"error: cannot read {path[0].strip()}: {exc.strerror}")
                return True
            self.execute(text)
            return True
        self.execute(script)
        return True

    def execute(self, script: str) -> None:
        started = time.perf_counter()
        try:
            for result in self.session.iter_execute(script):
                elapsed = time.perf_counter() - started
                if result.table is None:
                    self.write(f"{result.message} ({elapsed:.3f}s)")
                else:  # the table ends with taos's "Query OK, N row(s) in set"
                    self.write(f"{result.render('table', self.session.timezone)} ({elapsed:.3f}s)")
                started = time.perf_counter()
        except (TDStreamError, TimeValueError) as exc:
            self.write(str(exc))
        except Exception as exc:
            self.write(f"error: {type(exc).__name__}: {exc}")


def _shell_word(line: str) -> str | None:
    words = line.strip().rstrip(";").split()
    if not words:
        return None
    word = words[0].lower()
    if word in ("quit", "exit", "help") and len(words) == 1:
        return word
    if word == "source":
        return word
    return None


def lines_from(stream: Iterable[str]) -> Callable[[str], str | None]:
    """A ``read`` over non-interactive input (a pipe, a test): no prompts echoed."""
    iterator = iter(stream)

    def read(prompt: str) -> str | None:
        del prompt
        line = next(iterator, None)
        return None if line is None else line.rstrip("\n")

    return read


def interactive_reader(history: Path) -> Callable[[str], str | None]:
    """``input()`` with readline editing and a history file kept between sessions."""
    import readline

    with contextlib.suppress(OSError):  # first use: no history yet
        readline.read_history_file(history)
    readline.set_history_length(1000)

    def read(prompt: str) -> str | None:
        try:
            line = input(prompt)
        except EOFError:
            print()
            return None
        except KeyboardInterrupt:  # Ctrl-C drops the line being typed, as taos does
            print()
            return ""
        with contextlib.suppress(OSError):  # a read-only home still gets a working shell
            history.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(history)
        return line

    return read
