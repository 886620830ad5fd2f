"""Shipped test tools: the in-process harness that drives streams through Dagster's APIs
until nothing is pending, and the conformance runner. Users test their streams with these too.
"""
