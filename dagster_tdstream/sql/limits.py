"""Limits on statements, each with its reason; ``docs/sql-support.md`` lists them.

Owns the numbers only: the parser and the translator enforce them, with positions.
"""

# Spark's own parser refuses expression trees about 250 deep; 128 leaves room for the
# translation's own wrapping.
MAX_EXPRESSION_DEPTH = 128
# each level of parentheses, function calls and prefix operators costs the recursive-descent
# parser about a dozen Python frames, of the thousand Python allows
MAX_NESTING = 32
# TDengine streams a FILL's windows out; here they are rows of one Spark job on a shared server,
# and a stray row years from the others must not exhaust its memory
MAX_FILL_WINDOWS = 1_000_000

LIMITS = {
    "expression depth": f"{MAX_EXPRESSION_DEPTH} levels (each operator of a chain such as `a + b + …` is one)",
    "nesting": f"{MAX_NESTING} levels of parentheses, function calls, NOT and sign prefixes",
    "FILL windows": f"{MAX_FILL_WINDOWS:,} per group; narrow the range with `WHERE ts >= … AND ts < …`",
}
