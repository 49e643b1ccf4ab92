"""The decoder choice (NVDEC where this node's GPU decodes the source, else software) and its CPU fallback.

Real probes only: on a machine without an NVIDIA GPU and driver (CI) NVDEC refuses to open, so the choice is
software decoding and the output is exactly the software path's; on a GPU machine the same tests check that
the NVDEC path gives the same frames (count, size, and close pixels). The driver's GPU branch (the choice made
by a task on a GPU node) runs on a local Ray that declares a GPU: there the probe is real and refuses too.
"""

from __future__ import annotations

import asyncio
import uuid

import av
import numpy as np
import pytest
import ray
from media import decode_all, make_clip, psnr_y

from render_kernels.audio import encode_audio
from render_kernels.decoders import NVDEC_DECODERS, choose_video_decoder, nvdec_refusal, select_video_decoder
from render_kernels.encoders import choose_video_encoder, segment_threads
from render_kernels.mux import mux_segments
from render_kernels.plan import plan_segments
from render_kernels.probe import probe
from render_kernels.source_info import SourceInfo
from render_kernels.spec import RenderSpec
from render_kernels.video import encode_segment
from serve_app.rendering._render_driver import run_render
from serve_app.rendering._render_job import RenderJob
from serve_app.rendering._render_tasks import CodecsTask, choose_codecs

FPS = 10
SECONDS = 6.0
SEGMENT_S = 2.0  # the shortest segment here (VIDFORGE_MIN_SEGMENT_S): the 6 s clip cuts in three, with two seeks
DEADLINE_S = 180.0  # generous: the machine running the tests may be loaded


def cuvid_opens_here() -> bool:
    """Checked apart from the kernels: does h264_cuvid open on this machine at all?"""
    decoder = av.CodecContext.create("h264_cuvid", "r")
    try:
        decoder.open()
    except av.FFmpegError:
        return False
    return True


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """6 s, 1600x900 h264 (yuv420p), audio, keyframes every second: NVDEC's kind of source, downscaled to 720p."""
    root = tmp_path_factory.mktemp("gpu-decode")
    return make_clip(str(root / "clip.mp4"), seconds=SECONDS, width=1600, height=900, fps=FPS, gop=FPS)


def source_info(video_codec: str = "h264", pixel_format: str = "yuv420p") -> SourceInfo:
    return SourceInfo(
        path="x.mp4",
        duration_s=SECONDS,
        fps=FPS,
        frame_count=round(SECONDS * FPS),
        width=1600,
        height=900,
        video_codec=video_codec,
        keyframe_times=(0.0,),
        audio=None,
        pixel_format=pixel_format,
    )


def test_probe_refuses_nvdec_without_a_gpu_and_says_why():
    refusal = nvdec_refusal("h264", 1600, 900, "yuv420p")
    assert nvdec_refusal("h264", 1600, 900, "yuv420p") is refusal  # cached
    if cuvid_opens_here():
        assert refusal is None
    else:
        assert refusal is not None and refusal.startswith("h264_cuvid does not open here: ")
    # Sources NVDEC is not used for are refused before any GPU is asked.
    assert nvdec_refusal("prores", 640, 360, "yuv422p10le") == "no NVDEC decoder for prores"
    assert nvdec_refusal("h264", 321, 181, "yuv444p") == "NVDEC is used for 4:2:0 sources only, not yuv444p"


def test_select_video_decoder_follows_the_probe():
    info = source_info()
    # GPU node where h264_cuvid opens: the probe's answer is None (no refusal) -> NVDEC.
    assert select_video_decoder(info, None) == "h264_cuvid" == NVDEC_DECODERS["h264"]
    assert select_video_decoder(source_info("hevc", "yuv420p10le"), None) == "hevc_cuvid"
    # Where it does not open, or for a source it is not used for: the probe's refusal -> software.
    for refused in (source_info(), source_info("h264", "yuv444p"), source_info("prores", "yuv422p10le")):
        refusal = nvdec_refusal(refused.video_codec, refused.width, refused.height, refused.pixel_format)
        if refusal is not None:  # always, but for h264 4:2:0 on a GPU machine
            assert select_video_decoder(refused, refusal) is None
    here = nvdec_refusal(info.video_codec, info.width, info.height, info.pixel_format)
    assert choose_video_decoder(info) == select_video_decoder(info, here)
    assert choose_video_decoder(info) == ("h264_cuvid" if cuvid_opens_here() else None)


def test_spec_takes_only_nvdec_decoders():
    assert RenderSpec("mp4", "720p", video_decoder="hevc_cuvid").video_decoder == "hevc_cuvid"
    with pytest.raises(ValueError, match="video_decoder must be one of"):
        RenderSpec("mp4", "720p", video_decoder="h264")


def render_serially(source: str, spec: RenderSpec, out_path: str, workers: int) -> None:
    info = probe(source)
    segments = [encode_segment(source, s, spec, info) for s in plan_segments(info, workers, SEGMENT_S)]
    mux_segments(segments, encode_audio(source, spec.output_format), spec.output_format, out_path, info.fps)


@pytest.mark.slow  # encodes and decodes its segments
def test_segments_decode_as_chosen_here_with_the_software_paths_frames(clip, tmp_path):
    """The spec a GPU node's choice gives (here: software) renders the same frames as software decoding, over
    three segments (two seeks): identical without NVDEC, same count and close pixels with it."""
    info = probe(clip)
    assert (info.video_codec, info.pixel_format) == ("h264", "yuv420p")  # NVDEC's kind of source
    assert len(plan_segments(info, 3, SEGMENT_S)) == 3, "three segments, or the seeks go untested"
    software = RenderSpec("mp4", "720p", video_encoder=choose_video_encoder("mp4"))
    chosen = choose_codecs(CodecsTask(RenderSpec("mp4", "720p"), info))
    assert chosen.video_encoder == software.video_encoder and chosen.video_decoder == choose_video_decoder(info)

    for name, spec in (("software", software), ("chosen", chosen)):
        render_serially(clip, spec, str(tmp_path / f"{name}.mp4"), workers=3)
    reference, output = decode_all(str(tmp_path / "software.mp4")), decode_all(str(tmp_path / "chosen.mp4"))
    assert output.frame_count == reference.frame_count == info.frame_count
    assert (output.width, output.height) == (reference.width, reference.height) == (1280, 720)
    assert output.times == reference.times
    if chosen.video_decoder is None:
        assert all(np.array_equal(a, b) for a, b in zip(output.frames, reference.frames))
    else:  # the GPU's scaler, not swscale's bicubic: close, not equal
        assert min(psnr_y(a, b) for a, b in zip(output.frames, reference.frames)) >= 30


class Approve:
    async def progress(self, report) -> None:
        pass

    async def preview_ready(self, preview_path: str) -> bool:
        return True


@pytest.mark.ray
def test_driver_on_a_gpu_cluster_falls_back_to_software_decoding(clip, tmp_path):
    """The driver's GPU branch: the codecs are chosen by a task on the (declared) GPU node, where the real
    probes refuse NVENC and NVDEC, so the render is the software path's, frame for frame."""
    if cuvid_opens_here():
        pytest.skip("a real GPU: the fallback needs a node where NVDEC does not open")
    # The software path as the driver plans it: three segments on two CPUs, each encoder with the threads that leaves it.
    software = RenderSpec("mp4", "720p", video_encoder="libx264", segment_threads=segment_threads(2, 3))
    render_serially(clip, software, str(tmp_path / "software.mp4"), 3)
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, namespace=f"test-gpu-decode-{uuid.uuid4().hex}")
    try:
        assert ray.cluster_resources().get("GPU") == 1  # so the driver asks a GPU node
        job = RenderJob(
            clip, RenderSpec("mp4", "720p"), str(tmp_path / "driver.mp4"), workers=3, min_segment_s=SEGMENT_S
        )
        stats = asyncio.run(asyncio.wait_for(run_render(job, Approve()), DEADLINE_S))
    finally:
        ray.shutdown()
    reference, output = decode_all(str(tmp_path / "software.mp4")), decode_all(job.out_path)
    assert stats.frame_count == output.frame_count == reference.frame_count == probe(clip).frame_count
    assert output.times == reference.times
    assert all(np.array_equal(a, b) for a, b in zip(output.frames, reference.frames))
