"""The SQL side's hold on the Dagster that runs a warehouse's streams.

Owns: which Dagster instance (``DAGSTER_HOME``) and webserver serve a warehouse — recorded in
the catalog when a code location loads, so a ``tdstream sql`` in another shell finds them;
the names of a stream's sensor and schedule; making stream statements take effect there —
CREATE/DROP STREAM reload the code locations that serve tdstream, STOP/START toggle the
stream's sensor or schedule exactly as the UI's switch does (the webserver's GraphQL API) —
and reading switches flipped in the UI back into the registry (a sensor turned off in the UI
is a stopped stream). Must not change tables or stream definitions: the session commits its
change first and then calls this; a Dagster that cannot be reached is reported, never fatal.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..names import schedule_name, sensor_name
from ..storage.catalog import StreamInfo
from ..storage.warehouse import Warehouse

if TYPE_CHECKING:
    from dagster import DagsterInstance

WEBSERVER_ENV = "TDSTREAM_DAGSTER_URL"
DEFAULT_WEBSERVER = "http://127.0.0.1:3000"  # where `dagster dev` and `dg dev` listen by default
_HOME_KEY, _WEBSERVER_KEY = "dagster.home", "dagster.webserver"
# a code location serves tdstream when its repository has this resource (definitions.py)
WAREHOUSE_RESOURCE = "tdstream_warehouse"


@dataclass(frozen=True)
class DagsterLink:
    """Where the Dagster that runs a warehouse's streams lives."""

    home: str | None  # the instance's DAGSTER_HOME
    webserver: str  # base URL of its webserver (GraphQL at /graphql)

    @classmethod
    def from_environment(cls) -> DagsterLink | None:
        """The Dagster this process runs under: a code location served by `dagster dev` has
        ``DAGSTER_HOME`` (and ``TDSTREAM_DAGSTER_URL`` where the webserver is not on the
        default port); None outside one."""
        home, webserver = os.environ.get("DAGSTER_HOME") or None, os.environ.get(WEBSERVER_ENV) or None
        if home is None and webserver is None:
            return None
        return cls(home, webserver or DEFAULT_WEBSERVER)

    def record(self, warehouse: Warehouse) -> None:
        """Called by the code location on load: SQL sessions on this warehouse reach us here."""
        warehouse.catalog.put_settings({_HOME_KEY: self.home, _WEBSERVER_KEY: self.webserver})

    @classmethod
    def recorded(cls, warehouse: Warehouse) -> DagsterLink | None:
        """The link the last code location recorded, with ``DAGSTER_HOME`` and
        ``TDSTREAM_DAGSTER_URL`` of the caller taking precedence; None if no code location has
        served this warehouse and the caller names no instance."""
        stored = warehouse.catalog.settings("dagster.")
        home = os.environ.get("DAGSTER_HOME") or stored.get(_HOME_KEY)
        webserver = os.environ.get(WEBSERVER_ENV) or stored.get(_WEBSERVER_KEY)
        if home is None and webserver is None:
            return None
        return cls(home, webserver or DEFAULT_WEBSERVER)


class DagsterUnavailable(Exception):
    """The webserver did not answer, or answered with an error."""


@dataclass(frozen=True)
class _Instigator:
    location: str
    repository: str
    name: str
    kind: str  # sensor | schedule
    state_id: str
    status: str  # RUNNING | STOPPED (the status Dagster shows, declared in code or switched)


class DagsterStreamControl:
    """Makes stream statements take effect in a running Dagster (the session's ``control``)."""

    def __init__(self, link: DagsterLink, *, timeout_seconds: float = 60.0) -> None:
        self.link = link
        self.timeout_seconds = timeout_seconds  # a reload re-imports the code location
        self._held = False  # reloads deferred to the end of a script
        self._reload_pending = False

    # ------------------------------------------------------------------ what statements call

    def stream_created(self, stream_key: str) -> str:
        """After CREATE STREAM: the new stream's asset and sensor appear without a restart."""
        self._forget_switches(stream_key)  # those of an earlier stream of the same name
        return self._reload_all()

    def stream_dropped(self, stream_key: str) -> str:
        """After DROP STREAM: its definitions go (its output tables stay)."""
        self._forget_switches(stream_key)
        return self._reload_all()

    def hold_reloads(self) -> None:
        self._held, self._reload_pending = True, False

    def release_reloads(self) -> str | None:
        self._held = False
        if not self._reload_pending:
            return None
        self._reload_pending = False
        return self._reload_all()

    def _reload_all(self) -> str:
        """Reload every code location that serves tdstream (they build their definitions from
        the stream registry); within a script that holds reloads, once at its end."""
        if self._held:
            self._reload_pending = True
            return "Dagster: the code location is reloaded once, at the end of the script"
        try:
            reloaded = [self._reload(location) for location in self._locations_serving_tdstream()]
        except DagsterUnavailable as exc:
            return f"Dagster: {exc}; the change appears when the code location is reloaded"
        if not reloaded:
            return f"Dagster: no code location at {self.link.webserver} serves tdstream"
        return "Dagster: reloaded code location " + ", ".join(reloaded)

    def set_running(self, stream_key: str, running: bool) -> str:
        """After STOP/START STREAM: switch the stream's sensor or schedule in Dagster, as the
        UI's toggle does. Without a webserver, a switch stored in the instance is flipped
        directly; the sensor itself also skips while the registry says Stopped."""
        action = "started" if running else "stopped"
        try:
            if self._reload_pending:  # created earlier in this script: load it now
                self.release_reloads()
                self.hold_reloads()
            instigator = self._instigator(stream_key)
            if instigator is None:  # not loaded yet (created since the last reload)
                self._reload_all()
                instigator = self._instigator(stream_key)
            if instigator is None:
                return f"Dagster: no sensor or schedule for stream {stream_key} at {self.link.webserver}"
            self._switch(instigator, running)
            return f"Dagster: {instigator.kind} {instigator.name} {action}"
        except DagsterUnavailable as exc:
            flipped = self._switch_in_instance(stream_key, running)
            if flipped:
                return f"Dagster: {exc}; {flipped} {action} in the instance"
            return f"Dagster: {exc}; the sensor follows the stream's status on its next tick"

    def reconcile(self, warehouse: Warehouse) -> None:
        """Switches flipped in the UI become the streams' status: a sensor or schedule turned
        off there is a stopped stream, one turned on is a started one (the data written while
        it was off is processed, as START STREAM does)."""
        instance = self.instance
        if instance is None:
            return
        switched = switched_states(instance)
        for info in warehouse.catalog.list_streams():
            status = switched.get(sensor_name(info.key)) or switched.get(schedule_name(info.key))
            adopt_switch(warehouse, info, status)

    # ------------------------------------------------------------------ the instance

    @cached_property
    def instance(self) -> DagsterInstance | None:
        if self.link.home is None or not os.path.isdir(self.link.home):
            return None
        from dagster import DagsterInstance

        return DagsterInstance.from_config(self.link.home)

    def _stored_switches(self, stream_key: str) -> list[Any]:
        """The instance's stored states of the stream's sensor or schedule (none without one)."""
        instance = self.instance
        if instance is None:
            return []
        names = {sensor_name(stream_key), schedule_name(stream_key)}
        return [state for state in instance.all_instigator_state() if state.instigator_name in names]

    def _forget_switches(self, stream_key: str) -> None:
        for state in self._stored_switches(stream_key):
            assert self.instance is not None
            self.instance.delete_instigator_state(state.instigator_origin_id, state.selector_id)

    def _switch_in_instance(self, stream_key: str, running: bool) -> str | None:
        from dagster._core.scheduler.instigation import InstigatorStatus

        for state in self._stored_switches(stream_key):
            assert self.instance is not None
            status = InstigatorStatus.RUNNING if running else InstigatorStatus.STOPPED
            self.instance.update_instigator_state(state.with_status(status))
            return state.instigator_name
        return None

    # ------------------------------------------------------------------ the webserver

    def _graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            self.link.webserver.rstrip("/") + "/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
                answer = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DagsterUnavailable(f"no Dagster webserver answers at {self.link.webserver} ({reason})") from None
        if answer.get("errors"):
            raise DagsterUnavailable(f"Dagster webserver error: {answer['errors'][0].get('message')}")
        return answer["data"]

    def _workspace(self) -> list[dict[str, Any]]:
        data = self._graphql(_WORKSPACE_QUERY)["workspaceOrError"]
        if data["__typename"] != "Workspace":
            raise DagsterUnavailable(f"Dagster webserver error: {data.get('message')}")
        locations = []
        for entry in data["locationEntries"]:
            location = entry["locationOrLoadError"]
            if location is not None and location["__typename"] == "RepositoryLocation":
                locations.append({"name": entry["name"], "repositories": location["repositories"]})
        return locations

    def _locations_serving_tdstream(self) -> list[str]:
        return [
            location["name"]
            for location in self._workspace()
            if any(
                WAREHOUSE_RESOURCE in {r["name"] for r in repo["allTopLevelResourceDetails"]}
                for repo in location["repositories"]
            )
        ]

    def _reload(self, location: str) -> str:
        entry = self._graphql(_RELOAD_MUTATION, {"name": location})["reloadRepositoryLocation"]
        loaded = entry.get("locationOrLoadError") or {}
        if entry["__typename"] != "WorkspaceLocationEntry" or loaded.get("__typename") != "RepositoryLocation":
            message = loaded.get("message") or entry.get("message") or entry["__typename"]
            raise DagsterUnavailable(f"reloading code location {location} failed: {message.strip()}")
        return location

    def _instigator(self, stream_key: str) -> _Instigator | None:
        wanted = {("sensor", sensor_name(stream_key)), ("schedule", schedule_name(stream_key))}
        for location in self._workspace():
            for repo in location["repositories"]:
                for kind in ("sensor", "schedule"):
                    for item in repo[f"{kind}s"]:
                        if (kind, item["name"]) in wanted:
                            state = item[f"{kind}State"]
                            return _Instigator(
                                location["name"], repo["name"], item["name"], kind, state["id"], state["status"]
                            )
        return None

    def _switch(self, instigator: _Instigator, running: bool) -> None:
        if (instigator.status == "RUNNING") == running:
            return
        where = {"repositoryLocationName": instigator.location, "repositoryName": instigator.repository}
        if instigator.kind == "sensor" and running:
            selector = {**where, "sensorName": instigator.name}
            field, answer = "startSensor", self._graphql(_START_SENSOR, {"selector": selector})
        elif instigator.kind == "sensor":
            field, answer = "stopSensor", self._graphql(_STOP_SENSOR, {"id": instigator.state_id})
        elif running:
            selector = {**where, "scheduleName": instigator.name}
            field, answer = "startSchedule", self._graphql(_START_SCHEDULE, {"selector": selector})
        else:
            field, answer = "stopRunningSchedule", self._graphql(_STOP_SCHEDULE, {"id": instigator.state_id})
        outcome = answer[field]
        if "message" in outcome:  # every error type of these mutations carries one
            raise DagsterUnavailable(f"switching {instigator.name} failed: {outcome['message'].strip()}")


def switched_states(instance: DagsterInstance) -> dict[str, str]:
    """Sensors and schedules switched on or off by hand (UI, CLI, STOP/START): name → the
    stream status it means. Those still following their code's default are left out."""
    from dagster._core.scheduler.instigation import InstigatorStatus

    meaning = {InstigatorStatus.RUNNING: "Running", InstigatorStatus.STOPPED: "Stopped"}
    return {s.instigator_name: meaning[s.status] for s in instance.all_instigator_state() if s.status in meaning}


def adopt_switch(warehouse: Warehouse, info: StreamInfo, switched: str | None) -> StreamInfo:
    """The stream as it stands once a switch flipped in Dagster is taken as STOP or START."""
    if switched is None or switched == info.status:
        return info
    warehouse.catalog.set_stream_status(info.db, info.name, switched)
    updated = warehouse.catalog.get_stream(info.db, info.name)
    assert updated is not None
    return updated


_WORKSPACE_QUERY = """
query TDStreamWorkspace {
  workspaceOrError {
    __typename
    ... on PythonError { message }
    ... on Workspace {
      locationEntries {
        name
        locationOrLoadError {
          __typename
          ... on RepositoryLocation {
            repositories {
              name
              allTopLevelResourceDetails { name }
              sensors { name sensorState { id status } }
              schedules { name scheduleState { id status } }
            }
          }
        }
      }
    }
  }
}
"""

_RELOAD_MUTATION = """
mutation TDStreamReload($name: String!) {
  reloadRepositoryLocation(repositoryLocationName: $name) {
    __typename
    ... on WorkspaceLocationEntry {
      locationOrLoadError { __typename ... on PythonError { message } }
    }
    ... on RepositoryLocationNotFound { message }
    ... on ReloadNotSupported { message }
    ... on UnauthorizedError { message }
    ... on PythonError { message }
  }
}
"""

_START_SENSOR = """
mutation TDStreamStartSensor($selector: SensorSelector!) {
  startSensor(sensorSelector: $selector) {
    __typename
    ... on PythonError { message }
    ... on SensorNotFoundError { message }
    ... on UnauthorizedError { message }
  }
}
"""

_STOP_SENSOR = """
mutation TDStreamStopSensor($id: String) {
  stopSensor(id: $id) {
    __typename
    ... on PythonError { message }
    ... on UnauthorizedError { message }
  }
}
"""

_START_SCHEDULE = """
mutation TDStreamStartSchedule($selector: ScheduleSelector!) {
  startSchedule(scheduleSelector: $selector) {
    __typename
    ... on PythonError { message }
    ... on ScheduleNotFoundError { message }
    ... on UnauthorizedError { message }
  }
}
"""

_STOP_SCHEDULE = """
mutation TDStreamStopSchedule($id: String) {
  stopRunningSchedule(id: $id) {
    __typename
    ... on PythonError { message }
    ... on UnauthorizedError { message }
  }
}
"""
