"""How a stream looks in Dagster: subclass ``DagsterTDStreamTranslator`` and override
``get_asset_spec`` to change asset keys, groups, owners, tags or metadata."""

from __future__ import annotations

import hashlib
import json
import re

from dagster import AssetKey, AssetSpec, MetadataValue

from ..storage.registry import StreamDefinition


def key_part(name: str) -> str:
    """A database or table name as an asset key component Dagster can name an op after: a
    back-quoted name may hold any character, Dagster's names only ``[A-Za-z0-9_]`` (it maps
    ``-`` and ``.`` itself), so each other character is spelled ``_xHH_`` by its code point."""
    return re.sub(r"[^A-Za-z0-9_.\-]", lambda m: f"_x{ord(m.group()):x}_", name)


def code_version(stream: StreamDefinition) -> str:
    """A hash of the normalised statement: Dagster shows the stream as changed exactly when
    its SQL changed (white space and keyword case do not count)."""
    normalised = json.dumps(repr(stream.stmt), sort_keys=True)
    return hashlib.sha256(normalised.encode()).hexdigest()[:16]


class DagsterTDStreamTranslator:
    def get_asset_key(self, stream: StreamDefinition) -> AssetKey:
        db, table = stream.output or (stream.db, stream.name)
        return AssetKey(["tdstream", key_part(db), key_part(table)])

    def get_asset_spec(self, stream: StreamDefinition) -> AssetSpec:
        trigger_table = stream.trigger_table
        metadata = {
            "tdstream/stream": stream.key,
            "tdstream/sql": MetadataValue.md(f"```sql\n{stream.info.sql}\n```"),
            "tdstream/trigger_type": stream.stmt.trigger.kind,
            "tdstream/trigger_table": f"{trigger_table.db}.{trigger_table.name}" if trigger_table else "",
            "tdstream/output_table": ".".join(stream.output) if stream.output else "",
            "tdstream/partition_by": ", ".join(stream.group_columns),
        }
        return AssetSpec(
            key=self.get_asset_key(stream),
            description=f"Output of TDengine stream {stream.key} ({stream.stmt.trigger.kind} trigger).",
            group_name=stream.db,
            metadata=metadata,
            tags={"tdstream/trigger": stream.stmt.trigger.kind.lower()},
            kinds={"spark", "delta"},
            code_version=code_version(stream),
        )
