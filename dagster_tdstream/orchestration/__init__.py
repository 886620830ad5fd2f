"""Dagster wiring only: assets, sensors, resources, the translator and the definitions builder.

Owns how a registered stream appears in Dagster — one partitioned Spark asset (its output
table) and one trigger sensor over its WAL offsets — and nothing of the semantics: triggers
come from ``triggers/``, computation from ``compute/``, tables from ``storage/``. The only
package that imports ``dagster``.
"""
