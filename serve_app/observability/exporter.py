"""vidforge's Prometheus endpoint: one actor on the head that sums what every vidforge process reports
(serve_app/observability/_reporter.py) and serves it at `http://HOST:PORT/metrics` — VIDFORGE_METRICS_HOST (by
default the API's own address, `--host`) and VIDFORGE_METRICS_PORT (by default a free port, printed at start).

A cluster singleton like the registry (detached, named, pinned to the head, restarted by Ray): `vidforge serve`
and a Serve config's builder start it before the registry and the supervisor, and find it when it already runs
(its address then stays the one it was started with). Its HTTP server is prometheus_client's, on its own threads.
Series are named as the catalog names them (`vidforge_*`), summed over processes: one series per label set.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import ray
from prometheus_client import CollectorRegistry, start_http_server

from actors.actor_calls import ActorCall, ActorCast, ActorClient, ActorUnavailable
from actors.handle import singleton_actor_options
from serve_app._config import Config
from serve_app.observability.aggregate import Aggregate, PrincipalLabels
from serve_app.observability.catalog import ALL_METRICS
from serve_app.observability.metric import Report

EXPORTER_NAME = "vidforge-metrics"
EXPORTER = "metrics exporter"  # the actor, as its errors name it


class MetricsUnavailable(Exception):
    """The endpoint cannot listen where the settings say; the message is the one line an operator reads."""


def metrics_unavailable(host: str, port: int, err: OSError) -> MetricsUnavailable:
    """The one line for an endpoint that cannot listen on (host, port)."""
    return MetricsUnavailable(
        f"cannot serve metrics on {_netloc(host, port)}: {err.strerror or err}; pick another address or port"
        " with VIDFORGE_METRICS_HOST / VIDFORGE_METRICS_PORT"
    )


class MetricsExporter:
    def __init__(self, host: str, port: int, principals: PrincipalLabels) -> None:
        self._aggregate = Aggregate(ALL_METRICS, principals)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self._aggregate)
        try:
            self._server, _ = start_http_server(port, addr=host, registry=registry)
        except OSError as err:
            raise metrics_unavailable(host, port, err) from None

    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{_netloc(str(host), int(port))}/metrics"

    def report(self, source: str, report: Report) -> None:
        self._aggregate.add(source, report, time.monotonic())


class ExporterApi(Protocol):
    """What vidforge's processes ask of the exporter (MetricsExporter, whose methods are plain functions)."""

    async def url(self) -> str: ...
    async def report(self, source: str, report: Report) -> None: ...


class ExporterClient(ActorClient):
    """The cluster's exporter actor: its URL is awaited (at start), a report is sent and not awaited."""

    url = ActorCall(ExporterApi.url)
    report = ActorCast(ExporterApi.report)


def start_exporter(config: Config, principals: PrincipalLabels) -> str:
    """Start the endpoint (or find the running one) and return its URL; MetricsUnavailable when it cannot listen."""
    handle = (
        ray.remote(MetricsExporter)
        .options(**singleton_actor_options(EXPORTER_NAME, config.namespace))  # a failed start is not restarted
        .remote(config.metrics_host or config.host, config.metrics_port or 0, principals)
    )
    try:
        return asyncio.run(ExporterClient(handle, EXPORTER).url())
    except ActorUnavailable as err:  # its constructor's error (Ray's, the cause) ends the message: the one line again
        said = str(err.__cause__).strip().splitlines()[-1]
        raise MetricsUnavailable(said.split("MetricsUnavailable: ", 1)[-1]) from None


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
