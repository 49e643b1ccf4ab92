"""The environment Ray's own processes run with on a vidforge cluster.

Ray's defaults suit clusters of many short tasks. A render service runs a few long ones, and every tick of Ray's
housekeeping is CPU the encodes do not get: on a 2-core machine an idle vidforge server used 3.2 CPU-s per 30 s,
and a batch of renders through it cost more CPU than the same jobs as ffmpeg processes. These settings change that:

- `RAY_SERVE_CONTROL_LOOP_INTERVAL_S` 0.5 (Serve's default: 0.1). The Serve controller runs its loop this often
  whether or not anything changed, and it was the busiest process of an idle server (0.9 CPU-s per 30 s). vidforge's
  replicas answer HTTP themselves (serve_app.ingress.front), so the loop only starts, health-checks (every 10 s) and
  replaces them; half a second more there goes unnoticed, and a server starts as fast (checked: 10 s both ways).
  At 1.0 start-up took 1.5 s longer for little more gain.
- `RAY_event_stats` 0: no timing of every handler of the event loops in Ray's C++ parts (raylet, GCS, every
  worker). It feeds Ray's debug dumps only, and costs CPU in each of those processes all the time.
- `RAY_SERVE_METRICS_EXPORT_INTERVAL_MS` 1000 (Serve's default: 100). Each replica hands its cached metrics to
  Ray's metric API this often; Prometheus reads them every few seconds at best. 0.1 CPU-s per 30 s per replica.
- `RAY_LOG_MONITOR_MANY_FILES_THRESHOLD` 0 and `LOG_NAME_UPDATE_INTERVAL_S` 5. Ray's log monitor (one per node)
  lists the session's log folder again before each read of the files it follows, ten times a second, while the
  folder holds fewer than 1000 files; a render service starts a worker (two log files) per parse. With these it
  lists the folder every 5 s: the monitor went from 0.26 to 0.12 CPU-s per 30 s idle, and more under load. Its
  only readers are drivers that ask for their workers' output, which vidforge's do not (`log_to_driver=False`);
  a new worker's first lines reach such a driver up to 5 s later.
- `REPORTER_UPDATE_INTERVAL_MS` 30000 (default 5000). The dashboard agent's reporter reads the CPU and memory of
  every process on its node this often, for the dashboard's node view and the node metrics it exports; a render
  node runs a dozen or more. The agent went from 0.26 to 0.14 CPU-s per 30 s idle; those figures are 30 s old at
  worst (Prometheus commonly scrapes every 15–60 s).
- `RAY_idle_worker_killing_time_threshold_ms` 300000 (default 1000). Ray keeps as many idle worker processes as the
  node has CPUs and ends any more after this long idle. A render runs more tasks than it takes CPUs: beside its
  segments, the CPU-less watermark preview, source frame, ride-along audio and mux (see
  serve_app.rendering._task_calls). With Ray's second, the workers those ran were gone before the next render,
  which started them again in its own path: ~1 CPU-s each (Python, Ray, the kernels' imports), on the cores its
  segments encode on. A 10 s 1080p render on a warm 2-core server took 1.39 x the ffmpeg CLI's time with Ray's
  default and 1.01 x with five minutes (`benchmarks/render_throughput.py --mcp --seconds 10`); an idle server gives
  the extra workers back five minutes after its last render. The workers a render needs are kept past it by the
  warm pool (serve_app.rendering._warm_pool), which holds them in a task while the server idles.
- `RAY_task_events_max_num_task_in_gcs` 5000 (default 100000). The GCS keeps the events of this many tasks for the
  dashboard's task view, and a render runs about ten. At Ray's figure the GCS was the process of a server's tree that
  grew most over a 50-minute soak (+129 MiB of +334 MiB), still growing at its end; 5000 tasks are the last few
  hundred renders, older ones are dropped from that view first.

The first two took an idle server from 3.2 to 2.2 CPU-s per 30 s; the log monitor's and Serve's metrics settings,
measured the same hour on a slower day, from 2.8 to 2.3; the reporter's, another 0.1. What is left is mostly a
floor of Ray's: every Python worker's main thread wakes 100 times a second to check for signals (0.2 CPU-s per
30 s per worker process, fixed in Ray's core worker).

They must be in the environment of the process that starts a node's raylet: `vidforge serve` sets them
(`apply_ray_env_defaults`) before it starts its embedded cluster; on a cluster every `ray start` has them
(cluster.yaml, deploy/rayservice.yaml; tests/test_cluster_config.py checks both). An operator's own value of any
of them wins.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

RAY_ENV_DEFAULTS: dict[str, str] = {
    "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
    "RAY_event_stats": "0",
    "RAY_SERVE_METRICS_EXPORT_INTERVAL_MS": "1000",
    "RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0",
    "LOG_NAME_UPDATE_INTERVAL_S": "5",
    "REPORTER_UPDATE_INTERVAL_MS": "30000",
    "RAY_idle_worker_killing_time_threshold_ms": "300000",
    "RAY_task_events_max_num_task_in_gcs": "5000",
}


def apply_ray_env_defaults(environ: MutableMapping[str, str] = os.environ) -> None:
    """Put RAY_ENV_DEFAULTS into `environ` where it has no value of its own."""
    for name, value in RAY_ENV_DEFAULTS.items():
        environ.setdefault(name, value)
