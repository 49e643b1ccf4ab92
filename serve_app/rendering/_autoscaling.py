"""The elastic cluster: what vidforge tells Ray's autoscaler about its queue, and the capacity it plans renders for.

Ray's autoscaler starts nodes only for demand it can see: pending tasks, actors, placement groups, or the standing
request of `ray.autoscaler.sdk.request_resources`. vidforge keeps renders' CPU tasks in its own fair queue (the
SegmentScheduler) and hands Ray only as many as there are CPUs now, so without more the autoscaler sees at most one
pending task and a queue of 100 renders runs on the node that is up. With `VIDFORGE_AUTOSCALING_CONFIG` set:

- `AutoscalerView`: the worker node types the autoscaler may start, read from the cluster config it runs from (the
  one `ray up` writes to the head as ~/ray_bootstrap_config.yaml): how many CPUs the workers can grow to, and whether
  a GPU node type is offered (the GPU path may then wait for one; serve_app.rendering._render_plan).
- `ResourceDemand`: one bundle per task queued or running (`{"CPU": 1}`, or with its GPU share), principals taken in
  turn, each capped at `VIDFORGE_MAX_PRINCIPAL_CPUS` and all together at `VIDFORGE_MAX_CLUSTER_CPUS` (0: the
  autoscaler's own max). Running tasks count too: a standing request asks that the cluster's total resources fit the
  bundles, not that they be free, so leaving the running ones out would ask for nothing while every CPU is busy.
- `DemandPublisher`: keeps Ray's standing request equal to the latest demand. Every `request_resources` call replaces
  the previous one, so it is called with the whole demand whenever that changes, and with `[]` once the queue has
  drained: the autoscaler then removes the idle nodes after its `idle_timeout_minutes`.

The demand is only a request: the scheduler dispatches to the CPUs that exist, so the first render of a burst starts
on a free CPU at once, and a render never waits for a node that cannot come (the autoscaler at its max, a node type
the cloud cannot give) — it runs, later, on what is up. Without the setting (a fixed cluster, `make serve`) no demand
is issued and nothing here runs.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from ray.autoscaler.sdk import request_resources

logger = logging.getLogger(__name__)

# A task's resource shape, as (resource, amount) pairs in name order: hashable, so demand can be counted.
Bundle = tuple[tuple[str, float], ...]


def bundle(resources: Mapping[str, float]) -> Bundle:
    return tuple(sorted((name, float(amount)) for name, amount in resources.items() if amount))


CPU_BUNDLE = bundle({"CPU": 1})


@dataclass(frozen=True)
class NodeType:
    name: str
    cpus: float
    gpus: float
    max_workers: int


@dataclass(frozen=True)
class AutoscalerView:
    """The worker node types of the autoscaler's cluster config, and its cap on worker nodes."""

    node_types: tuple[NodeType, ...]
    max_workers: int

    @classmethod
    def from_cluster_config(cls, path: str) -> AutoscalerView:
        """Read a Ray cluster config (YAML or JSON: `available_node_types`, `head_node_type`, `max_workers`)."""
        config = yaml.safe_load(Path(path).expanduser().read_text())
        head = config.get("head_node_type")
        types = tuple(
            NodeType(
                name,
                float(node.get("resources", {}).get("CPU", 0)),
                float(node.get("resources", {}).get("GPU", 0)),
                int(node.get("max_workers", 0)),
            )
            for name, node in config["available_node_types"].items()
            if name != head
        )
        return cls(types, int(config.get("max_workers", sum(t.max_workers for t in types))))

    @property
    def max_cpus(self) -> int:
        """The most CPUs the worker nodes can add up to: every type at its max, the largest first, within the
        config's cap on worker nodes."""
        left, total = self.max_workers, 0.0
        for node_type in sorted(self.node_types, key=lambda t: t.cpus, reverse=True):
            count = min(node_type.max_workers, left)
            total += count * node_type.cpus
            left -= count
        return int(total)

    @property
    def offers_gpu(self) -> bool:
        return any(t.gpus > 0 and t.max_workers > 0 for t in self.node_types)


@dataclass(frozen=True)
class DemandCaps:
    principal_cpus: int  # what one principal's work may ask for; 0: no cap of its own
    cluster_cpus: int  # what all of it together may ask for


@dataclass(frozen=True)
class ResourceDemand:
    """The bundles vidforge asks the autoscaler to make room for (in name order: equal demands compare equal)."""

    bundles: tuple[Bundle, ...] = ()

    @classmethod
    def of(cls, wanted: Mapping[str, Counter[Bundle]], caps: DemandCaps) -> ResourceDemand:
        """The demand of each principal's tasks (queued or running), one bundle a task: principals in turn (so
        the cluster cap is shared, not taken by whoever queued most), each up to its cap."""
        lanes = {p: deque(sorted(tasks.elements())) for p, tasks in wanted.items() if tasks}
        asked: dict[str, float] = dict.fromkeys(lanes, 0.0)
        total, taken = 0.0, []
        while lanes:
            for principal in list(lanes):
                lane = lanes[principal]
                cpus = dict(lane[0]).get("CPU", 0.0)
                over_own = caps.principal_cpus and asked[principal] + cpus > caps.principal_cpus
                if over_own or total + cpus > caps.cluster_cpus:
                    del lanes[principal]
                    continue
                taken.append(lane.popleft())
                asked[principal] += cpus
                total += cpus
                if not lane:
                    del lanes[principal]
        return cls(tuple(sorted(taken)))

    @property
    def cpus(self) -> float:
        return sum(dict(b).get("CPU", 0.0) for b in self.bundles)

    def request(self) -> list[dict[str, float]]:
        """As `request_resources(bundles=...)` takes it."""
        return [dict(b) for b in self.bundles]


class DemandPublisher:
    """Ray's standing resource request, kept equal to the latest demand (sent only when it changes)."""

    def __init__(self) -> None:
        self.published: ResourceDemand | None = None

    def publish(self, demand: ResourceDemand) -> None:
        if demand == self.published:
            return
        request_resources(bundles=demand.request())
        self.published = demand
        logger.info("autoscaler demand: %d bundles, %g CPUs", len(demand.bundles), demand.cpus)


@dataclass
class ElasticCluster:
    """What the scheduler and the driver need to know of an autoscaling cluster: its node types, the caps on
    demand, and the one publisher of that demand (per supervisor)."""

    view: AutoscalerView
    caps: DemandCaps
    publisher: DemandPublisher

    @classmethod
    def of(
        cls, autoscaling_config: str | None, max_principal_cpus: int, max_cluster_cpus: int
    ) -> ElasticCluster | None:
        """From the settings (VIDFORGE_AUTOSCALING_CONFIG, VIDFORGE_MAX_PRINCIPAL_CPUS, VIDFORGE_MAX_CLUSTER_CPUS);
        None on a fixed cluster (no autoscaling config)."""
        if not autoscaling_config:
            return None
        view = AutoscalerView.from_cluster_config(autoscaling_config)
        cluster_cpus = min(max_cluster_cpus, view.max_cpus) if max_cluster_cpus else view.max_cpus
        return cls(view, DemandCaps(max_principal_cpus, cluster_cpus), DemandPublisher())
