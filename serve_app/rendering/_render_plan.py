"""What a render will do, and where: the source's facts, the segments it is cut into, its video codecs and the nodes
its segments run on.

The source's facts (size, rate, frame count, keyframes) come from the upload's own parse when the job has them
(`job.source_info`, kept with the asset): they are held to `job.limits` again (lowered since, perhaps) and the
segments start without another parse of the file. Otherwise the probe and the watermark preview run first, together,
in one isolated parser. That parse of a file nobody vetted runs in `parse_isolated` (a process of its own, with the
job's memory limit and deadline, serve_app.media.media_probe), never in this process: a libav crash, hang or memory
bomb on that file ends this render as unusable media (UnsupportedMedia or OverLimit), and the supervisor and every
other render carry on.

A render is cut into a segment per CPU of the cluster, busy or not (SegmentScheduler.plan_width), so the last renders
of a batch spread over the CPUs the others leave; `job.workers` (VIDFORGE_RENDER_WORKERS) fixes the count instead.
Each segment's decoder, scaler and encoder get the CPUs the render has to itself as threads
(render_kernels.segment_threads): one where every CPU has a segment or other work waits, as a thread more only costs
CPU there.

The video encoder and decoder are chosen once per render, on a GPU node when the cluster has GPUs (h264_nvenc when it
opens there, else libx264; NVDEC decoding and downscaling when it decodes the source there, else software), and
written into the spec every segment gets: all segments must share one encoder (one stream, one set of parameter
sets), and a retried segment must not switch encoder or decoder (its bytes would change). Without GPUs nothing is
probed: software decoding, and the encoder chosen here. Segment tasks ask for a GPU share when either choice is on
the GPU (an H100/H200 has NVDEC but no NVENC): they must run where it opens. VIDFORGE_GPU (`job.gpu`) decides whether
that is tried: `off` never; `auto` where a GPU node is up, or where the autoscaler offers a GPU node type and one
starts within VIDFORGE_GPU_WAIT_S (the codec task, pending for a GPU, is the demand the autoscaler sees), else on CPU
nodes; `require` always, waiting for a GPU node as long as the render may run, and then every segment runs on a GPU
node, whatever opened there (a GPU's NVENC/NVDEC, or that node's CPUs for what they do not take). On an autoscaling
cluster, or where a GPU was considered, the choice and the nodes the segments finished on are reported as the status
message's placement note (`Placement`), and logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, replace

import ray

from mcp_protocol.progress import PLACEMENT_PREFIX
from render_kernels.decoders import NVDEC_DECODERS
from render_kernels.encoders import choose_video_encoder, segment_threads
from render_kernels.plan import Segment, plan_segments
from render_kernels.reading import read_source
from render_kernels.source_info import SourceInfo
from render_kernels.spec import FORMAT_ENCODERS, RenderSpec
from serve_app.media.media_probe import parse_isolated
from serve_app.rendering._autoscaling import Bundle, ElasticCluster, bundle
from serve_app.rendering._render_job import RenderJob
from serve_app.rendering._render_tasks import CodecsTask
from serve_app.rendering._scheduling import SegmentScheduler
from serve_app.rendering._task_calls import RenderTasks

logger = logging.getLogger(__name__)

GPU_ENCODERS = frozenset({"h264_nvenc"})
GPU_ENCODED_FORMATS = frozenset({"mp4", "mov"})  # what h264_nvenc encodes; webm is VP9, on the CPU


class GpuUnavailable(Exception):
    """VIDFORGE_GPU=require, but the cluster has no GPU node and its autoscaler offers none."""


def gpu_path_serves(spec: RenderSpec, info: SourceInfo) -> bool:
    """Whether a GPU would take part of this render's work: NVENC encodes its output, or NVDEC decodes its source."""
    return spec.output_format in GPU_ENCODED_FORMATS or info.video_codec in NVDEC_DECODERS


async def source_facts(job: RenderJob, stages: dict[str, float]) -> tuple[SourceInfo, bytes | None]:
    """The source's facts, and the watermark preview PNG when the parser made it (its times kept in `stages`).

    Facts the upload found are held to `job.limits` (lowered since, perhaps) and used as they are: no parser
    starts, and the approval gate renders the preview beside the segments. Without them, one parser probes the
    source and renders the preview together."""
    if (info := job.source_info) is not None:
        job.limits.check_video(info.width, info.height, info.fps, info.frame_count, info.duration_s)
        return info, None
    started = time.perf_counter()
    source = await parse_isolated(job.parse, read_source, job.source_path, job.limits, job.spec)
    stages["probe"] = time.perf_counter() - started - source.preview_s  # the parser's start-up included
    if source.preview_png is not None:
        stages["preview"] = source.preview_s
    return source.info, source.preview_png


class Placement:
    """Where a render's segments go: the GPU share each segment task asks for (0: none), and the status message's
    placement note, said (`said`) on an autoscaling cluster or where a GPU was considered, with the nodes its
    finished segments ran on."""

    def __init__(self, run: str) -> None:
        self.run = run  # the run's key, in the log
        self.said: str | None = None
        self.gpu_share = 0.0
        self._nodes: Counter[str] = Counter()  # finished segments per node

    async def fix_codecs(
        self, job: RenderJob, info: SourceInfo, segment_count: int, elastic: ElasticCluster | None, tasks: RenderTasks
    ) -> RenderSpec:
        """The job's spec with its video encoder and decoder decided, and the segments placed (see the module
        docstring: VIDFORGE_GPU)."""
        spec = job.spec
        gpus = ray.cluster_resources().get("GPU", 0)
        can_start = elastic is not None and elastic.view.offers_gpu
        if job.gpu == "require" and not gpus and not can_start:
            raise GpuUnavailable("VIDFORGE_GPU=require, but the cluster has no GPU node and its autoscaler offers none")
        wanted = job.gpu == "require" or (job.gpu == "auto" and gpu_path_serves(spec, info))
        if elastic is not None:
            self.said = "CPU nodes"
        if wanted and (gpus or can_start):
            # Decide on a GPU node: whether NVENC and NVDEC open is a property of the node.
            wait_s = None if job.gpu == "require" or gpus else job.gpu_wait_s
            chosen = await tasks.codecs_within(CodecsTask(spec, info), wait_s)
            if chosen is None:
                self.said = f"CPU nodes (no GPU node started within VIDFORGE_GPU_WAIT_S, {wait_s:g} s)"
            elif job.gpu == "require" or chosen.video_encoder in GPU_ENCODERS or chosen.video_decoder is not None:
                self.said = f"GPU nodes ({_codecs_text(chosen)})"
                logger.info("render %s: %s", self.run, self.said)
                self.gpu_share = min(1.0, max(gpus, 1) / segment_count)  # the segments share the GPUs
                return chosen
            else:
                spec = chosen
                self.said = "CPU nodes (neither NVENC nor NVDEC opens on the GPU node)"
        if spec.video_encoder is None and job.gpu == "off":  # the software encoder, even where this node has NVENC
            spec = replace(spec, video_encoder=FORMAT_ENCODERS[spec.output_format][0])
        elif spec.video_encoder is None:
            spec = replace(spec, video_encoder=await asyncio.to_thread(choose_video_encoder, spec.output_format))
        if self.said is not None:
            logger.info("render %s: %s", self.run, self.said)
        return spec

    def segment_finished(self, node: str) -> None:
        """A segment finished on the Ray node `node`: the note names it, where it is said."""
        if self.said is not None:
            self._nodes[node[-8:]] += 1  # a node id's tail: where they differ

    def log_note(self) -> None:
        """Log the placement note, where it is said."""
        if self.said is not None:
            logger.info("render %s: %s", self.run, self.note())

    def note(self) -> str | None:
        """The status message's placement note: where the segments go, and the nodes those finished ran on."""
        if self.said is None:
            return None
        note = f"{PLACEMENT_PREFIX}{self.said}"
        if self._nodes:
            nodes = ", ".join(f"{count} on node …{node}" for node, count in sorted(self._nodes.items()))
            note += f"; segments finished: {nodes}"
        return note + "."


@dataclass(frozen=True)
class RenderPlan:
    """The segments a render is cut into, the spec each gets (codecs decided, threads set) and where they go."""

    segments: list[Segment]
    spec: RenderSpec
    placement: Placement

    @property
    def segment_bundle(self) -> Bundle:
        """What a segment task asks Ray for: one CPU, and its GPU share on the GPU path."""
        return bundle({"CPU": 1, "GPU": self.placement.gpu_share})


async def plan_render(
    job: RenderJob, info: SourceInfo, scheduler: SegmentScheduler, tasks: RenderTasks, run: str
) -> RenderPlan:
    """The plan of run `run` of `job` on the cluster `scheduler` shares out (see the module docstring)."""
    width = job.workers or scheduler.plan_width(job.principal)
    segments = plan_segments(info, width, job.min_segment_s, _max_segment_frames(job, info), job.cut_multiple(info))
    placement = Placement(run)
    spec = await placement.fix_codecs(job, info, len(segments), scheduler.elastic, tasks)
    free = scheduler.free_cpus()  # what the render has to itself: threads beyond one segment a CPU
    return RenderPlan(segments, replace(spec, segment_threads=segment_threads(free, len(segments))), placement)


def _max_segment_frames(job: RenderJob, info: SourceInfo) -> int:
    width, height = job.spec.output_size(info)
    return max(1, job.segment_max_megapixels * 1_000_000 // (width * height))


def _codecs_text(spec: RenderSpec) -> str:
    decoder = spec.video_decoder or "software decoding"
    return f"encoder {spec.video_encoder}, {decoder}"
