"""The ready code location that ``dagster dev`` loads (see workspace.yaml).

Every ``.sql`` file in ``assets/streams/`` is applied to the embedded warehouse (``./.tdstream``,
or ``TDSTREAM_WAREHOUSE``) and every registered stream — from those files or created at run
time with ``tdstream sql`` — becomes a partitioned Spark asset with its trigger sensor.
"""

import os
from pathlib import Path

from dagster import Definitions

from dagster_tdstream import TDStreamProject, build_definitions
from sensors.demo_feeder import demo_meter_feeder

ROOT = Path(__file__).resolve().parent

project = TDStreamProject(
    warehouse=os.environ.get("TDSTREAM_WAREHOUSE", str(ROOT / ".tdstream")),
    sql_files=sorted((ROOT / "assets" / "streams").glob("*.sql")),
    # TDSTREAM_SPARK_MASTER, else local[2]: the master of the warm local Spark Connect server
    spark_master=os.environ.get("TDSTREAM_SPARK_MASTER"),
)

defs = Definitions.merge(build_definitions(project), Definitions(sensors=[demo_meter_feeder]))
