"""Video decoder choice: NVDEC (FFmpeg's cuvid decoders) where this node's GPU decodes the source, else software.

NVDEC decodes on the GPU and resizes there too (cuvid's `resize` option, to the output size), so a segment
skips both the CPU decode and the CPU scaler; its frames come back in system memory (nv12 for 8-bit 4:2:0),
which the frame pipeline turns into yuv420p like any decoded frame. Only the pixels differ (the GPU's scaler
is not swscale's bicubic): frame count, size and timestamps are the software path's.

Only 4:2:0 sources go to NVDEC: every NVDEC generation decodes 4:2:0, while 4:2:2 and 4:4:4 depend on the GPU
and would only fail once decoding started. Bit depth and frame size are checked by FFmpeg itself when the
decoder opens (against the GPU's decode capabilities), which is what the probe does.
"""

from __future__ import annotations

import functools

import av
from av.codec.codec import UnknownCodecError

from .source_info import SourceInfo

# The NVDEC decoder for each source codec (FFmpeg's codec names); absent: software only.
NVDEC_DECODERS = {
    "h264": "h264_cuvid",
    "hevc": "hevc_cuvid",
    "av1": "av1_cuvid",
    "vp8": "vp8_cuvid",
    "vp9": "vp9_cuvid",
    "mpeg2video": "mpeg2_cuvid",
    "mpeg4": "mpeg4_cuvid",
}
NVDEC_PIXEL_FORMATS = frozenset({"yuv420p", "yuvj420p", "nv12", "yuv420p10le", "p010le"})


def open_nvdec(
    decoder: str,
    width: int,
    height: int,
    pixel_format: str,
    extradata: bytes | None = None,
    resize: tuple[int, int] | None = None,
) -> av.VideoCodecContext:
    """An opened NVDEC decoder for a width x height `pixel_format` stream (with the stream's `extradata`: its
    parameter sets), giving frames at `resize` (width, height) when given.

    Raises UnknownCodecError when this FFmpeg build has no such decoder, av.FFmpegError when it does not open
    here (no GPU or driver, or the stream past the GPU's decode capabilities).
    """
    context = av.CodecContext.create(decoder, "r")
    assert isinstance(context, av.VideoCodecContext)  # a video codec's context
    # FFmpeg's cuvid checks the GPU's capabilities for this size and bit depth when it opens.
    context.width, context.height, context.pix_fmt = width, height, pixel_format
    context.extradata = extradata
    if resize is not None:
        context.options = {"resize": f"{resize[0]}x{resize[1]}"}
    context.open()
    return context


def open_video_decoder(stream: av.VideoStream, nvdec: str | None, width: int, height: int) -> av.VideoCodecContext:
    """The decoder a segment reads `stream` with: its own software decoder (`nvdec` None), or the NVDEC decoder
    `nvdec`, which gives frames at width x height when that is a downscale (an upscale is left to the CPU scaler,
    as in software: NVDEC's scaler is relied on only where it saves the CPU the most work, shrinking)."""
    if nvdec is None:
        return stream.codec_context
    source = stream.codec_context
    shrink = width <= source.width and height <= source.height
    return open_nvdec(
        nvdec, source.width, source.height, source.pix_fmt or "", source.extradata, (width, height) if shrink else None
    )


@functools.lru_cache(maxsize=1024)
def nvdec_refusal(video_codec: str, width: int, height: int, pixel_format: str) -> str | None:
    """Why NVDEC does not decode a width x height `pixel_format` `video_codec` stream on this node, or None when
    it does (its decoder opens). Cached (each probe starts a CUDA context): a property of the node for a kind of
    stream."""
    decoder = NVDEC_DECODERS.get(video_codec)
    if decoder is None:
        return f"no NVDEC decoder for {video_codec}"
    if pixel_format not in NVDEC_PIXEL_FORMATS:
        return f"NVDEC is used for 4:2:0 sources only, not {pixel_format or 'an unknown pixel format'}"
    try:
        open_nvdec(decoder, width, height, pixel_format)
    except UnknownCodecError:
        return f"this FFmpeg build has no {decoder}"
    except av.FFmpegError as err:  # no GPU or driver, or the stream past the GPU's capabilities
        _, _, cause = str(err).partition("last error log: ")  # FFmpeg's own message, when its logging is on
        return f"{decoder} does not open here: {err.strerror}" + (f" ({cause.strip()})" if cause else "")
    return None


def select_video_decoder(info: SourceInfo, refusal: str | None) -> str | None:
    """The NVDEC decoder for `info`'s codec when `refusal` (nvdec_refusal's answer for the source) is None, else
    None: software decoding."""
    return NVDEC_DECODERS[info.video_codec] if refusal is None else None


def choose_video_decoder(info: SourceInfo) -> str | None:
    """The decoder segments of this source read it with on this node: NVDEC when it decodes the source here,
    else None (software)."""
    return select_video_decoder(info, nvdec_refusal(info.video_codec, info.width, info.height, info.pixel_format))
