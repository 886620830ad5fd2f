"""The warehouse: Delta Lake tables (delta-rs), the SQLAlchemy catalog, Spark reads.

Owns table files, metadata, the WAL (Delta versions and change feed), the stream registry,
trigger checkpoints and the trigger queue. Must not import Dagster.
"""
