"""Table subscription (TDengine 2.x): clients consuming a table's WAL, outside any stream."""
