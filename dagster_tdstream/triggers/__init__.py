"""Trigger semantics, once: window arithmetic and the per-group state machines.

Owns when a trigger fires: which windows a row belongs to, when a window opens and closes,
what a late row or an update re-fires. Pure Python on Arrow/lists: no Dagster, no Spark, no
catalog. The same definitions serve the sensor (incremental, per group, with carried state)
and bulk recomputation (the Spark labelling SQL comes from the same spec objects).
"""
