"""On demand: the fuzzer at 10,000 statements (issue 19's figure, in docs/benchmarks.md).

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/fuzz.py [--count 10000] [--seed 1]

Prints statements / accepted / rejected / crashes / hangs / partial writes and every defect.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dagster_tdstream.compute.spark import build_spark_session
from dagster_tdstream.testing.conformance import SYNTAX_TEST_TABLES
from dagster_tdstream.testing.fuzz import FuzzReport, run_fuzz

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    corpus = ROOT / "tests" / "conformance" / "tdengine"

    def progress(n: int, report: FuzzReport) -> None:
        if (n + 1) % 1000 == 0:
            print(f"{n + 1} statements, {len(report.defects)} defect(s)", flush=True)

    report = run_fuzz(
        args.count,
        seed=args.seed,
        spark=build_spark_session(),
        corpus_files=(corpus / "create_stream_statements.txt", corpus / "invalid_statements.txt"),
        setup_files=(SYNTAX_TEST_TABLES,),
        progress=progress,
    )
    print(
        f"statements {report.statements}, accepted {report.accepted}, rejected {report.rejected}, "
        f"crashes {len(report.crashes)}, hangs {len(report.hangs)}, partial writes {len(report.partial_writes)}, "
        f"{report.seconds:.0f} s"
    )
    for defect in report.defects:
        print("DEFECT", defect)
    return 1 if report.defects else 0


if __name__ == "__main__":
    sys.exit(main())
