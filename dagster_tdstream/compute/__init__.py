"""A stream run's work: evaluate a batch of triggers in one Spark job and write the output.

Owns turning pending triggers + the stream's query into one vectorised Spark plan, and the
output table (creation on first result, upsert on the primary key, one Delta commit). Must
not import Dagster: the orchestration layer calls in here.
"""
