"""Notifications: TDengine's WebSocket protocol for stream events (NOTIFY … ON …).

``events.py`` turns a run's triggers and results into event objects and outbox rows;
``messages.py`` packs events into messages of bounded size; ``delivery.py`` sends the outbox
over WebSocket with TDengine's failure policies; ``listen.py`` is a small receiver for users
(``tdstream listen``). No Dagster here: ``orchestration/notifications.py`` runs delivery as an
op hook and a sensor.
"""
