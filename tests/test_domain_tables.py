"""The values a render request may name (the wire's `Resolution`, `Position`, `OutputFormat`, and the published
inputSchema's enums) and the tables that give each its meaning further down (the kernels' frame bounds, watermark
anchors, encoders and muxer options, the review page's words) cover each other: a value added in one place is never
silently missing from another. Each test iterates the wire's values and checks each is mapped, then that nothing
else is."""

from __future__ import annotations

from typing import get_args

import pytest

from mcp_protocol.catalog import input_schemas
from mcp_protocol.domain import MIME_BY_EXT, OutputFormat, Position, Resolution
from render_kernels.compose import watermark_box
from render_kernels.mux import CONTAINER_OPTIONS
from render_kernels.source_info import SourceInfo
from render_kernels.spec import FORMAT_ENCODERS, POSITIONS, RESOLUTIONS, WATERMARK_ANCHORS, RenderSpec, WatermarkSpec
from serve_app.ingress.review.view import POSITIONS as POSITION_WORDS

RENDER_ARGUMENTS = input_schemas()["vidforge_render_video"]["properties"]
LANDSCAPE = SourceInfo("x.mp4", 1.0, 25.0, 25, 1920, 1080, "h264", (), None)


@pytest.mark.parametrize("resolution", get_args(Resolution))
def test_every_resolution_has_its_frame_bounds(resolution):
    bounds = RESOLUTIONS[resolution]
    assert bounds.short_side < bounds.max_long_side and bounds.short_side % 2 == bounds.max_long_side % 2 == 0
    assert RenderSpec("mp4", resolution).output_size(LANDSCAPE)[1] == bounds.short_side  # 16:9 keeps the short side


def test_the_kernels_know_exactly_the_wires_resolutions():
    assert set(RESOLUTIONS) == set(get_args(Resolution)) == set(RENDER_ARGUMENTS["resolution"]["enum"])


@pytest.mark.parametrize("position", get_args(Position))
def test_every_position_is_placed_and_worded(position):
    WatermarkSpec("logo.png", position=position)  # accepted
    x, y, w, h = watermark_box(position, 1280, 720, 200, 100)
    assert 0 <= x and x + w <= 1280 and 0 <= y and y + h <= 720
    assert POSITION_WORDS[position]


def test_the_positions_are_exactly_the_wires_and_each_lands_elsewhere():
    wire = get_args(Position)
    assert set(POSITIONS) == set(WATERMARK_ANCHORS) == set(POSITION_WORDS) == set(wire)
    assert set(RENDER_ARGUMENTS["watermark"]["properties"]["position"]["enum"]) == set(wire)
    assert len({watermark_box(position, 1280, 720, 200, 100) for position in wire}) == len(wire)


@pytest.mark.parametrize("output_format", get_args(OutputFormat))
def test_every_output_format_has_encoders_a_muxer_and_a_type(output_format):
    assert RenderSpec(output_format, "720p").output_format == output_format  # accepted
    assert FORMAT_ENCODERS[output_format] and MIME_BY_EXT[output_format]
    assert output_format in CONTAINER_OPTIONS


def test_the_kernels_know_exactly_the_wires_output_formats():
    wire = set(get_args(OutputFormat))
    assert set(FORMAT_ENCODERS) == set(CONTAINER_OPTIONS) == set(MIME_BY_EXT) == wire
    assert set(RENDER_ARGUMENTS["output_format"]["enum"]) == wire


def test_a_streams_rungs_and_defaults_are_one_table_on_the_wire_and_in_the_kernels():
    """The wire's rungs (domain, inputSchema) are the kernels' (render_kernels.ladder), in the same order, and the
    `streaming` defaults and bounds the inputSchema documents are the ones the server applies."""
    from mcp_protocol.domain import DEFAULT_LADDER, RUNGS, Rung, Streaming
    from render_kernels.ladder import DEFAULT_RUNGS, DEFAULT_SEGMENT_S, SEGMENT_S_RANGE
    from render_kernels.ladder import RUNGS as KERNEL_RUNGS

    schema = RENDER_ARGUMENTS["streaming"]["properties"]
    assert RUNGS == get_args(Rung) == tuple(KERNEL_RUNGS) == tuple(schema["ladder"]["items"]["enum"])
    assert DEFAULT_LADDER == DEFAULT_RUNGS
    assert Streaming().segment_s == DEFAULT_SEGMENT_S == schema["segment_s"]["default"]
    assert SEGMENT_S_RANGE == (schema["segment_s"]["minimum"], schema["segment_s"]["maximum"])
    field = Streaming.model_fields["segment_s"].metadata
    assert [(type(m).__name__, getattr(m, "ge", getattr(m, "le", None))) for m in field] == [
        ("Ge", SEGMENT_S_RANGE[0]),
        ("Le", SEGMENT_S_RANGE[1]),
    ]
    for resolution in get_args(Resolution):  # every resolution's default ladder: the rungs up to it
        rungs = Streaming().rungs(resolution)
        assert rungs and all(RUNGS.index(rung) >= RUNGS.index(resolution) for rung in rungs)
