"""Live progress arithmetic and text (`mcp_protocol.progress`) and how the wire views use it: pure, no Ray."""

from __future__ import annotations

import pytest

from mcp_protocol import views
from mcp_protocol._elicitation import ElicitationMode
from mcp_protocol.domain import PendingApproval, RenderRequest, TaskRecord, Watermark
from mcp_protocol.progress import (
    END_POLL_MIN_MS,
    MUX_ALLOWANCE_MS,
    RenderProgress,
    SpeedMeter,
    eta_text,
    poll_interval_ms,
)
from mcp_protocol.timefmt import now_ms

ENCODING = RenderProgress("rendering", 3021, 7200, fps=58.3, source_fps=30.0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_encoding_message_carries_percent_frames_speed_eta_and_phase():
    assert ENCODING.fraction == 0.4196
    assert ENCODING.realtime == pytest.approx(58.3 / 30)
    assert ENCODING.eta_s == pytest.approx((7200 - 3021) / 58.3)
    assert ENCODING.message() == (
        "Rendering: 41% (frame 3021/7200), encoding at 58.3 fps (1.94x real time), about 1 min 12 s left."
    )


@pytest.mark.parametrize(
    "progress, message",
    [
        (RenderProgress("probing"), "Rendering: probing the source."),
        (
            RenderProgress("rendering", 0, 600, source_fps=30.0),
            "Rendering: 0% (frame 0/600), encoding; measuring speed.",
        ),
        (
            RenderProgress("rendering", 599, 600, fps=40.0),  # no source rate known: no "x real time"
            "Rendering: 99% (frame 599/600), encoding at 40.0 fps, about 1 s left.",
        ),
        (
            RenderProgress("rendering", 600, 600, fps=40.0, source_fps=30.0),
            "Rendering: 100% (frame 600/600), encoding done.",
        ),
        (
            RenderProgress("muxing", 600, 600, source_fps=30.0),
            "Rendering: 100% (frame 600/600), muxing the output file.",
        ),
        (
            RenderProgress("muxing", 600, 600, source_fps=30.0, frames_written=240),
            "Rendering: 100% (frame 600/600), muxing the output file, frame 240/600 written.",
        ),
        (
            RenderProgress("muxing", 600, 600, source_fps=30.0, frames_written=600),
            "Rendering: 100% (frame 600/600), storing the output file.",
        ),
    ],
)
def test_message_names_each_phase(progress, message):
    assert progress.message() == message


def test_fraction_is_unknown_before_probing_and_never_above_one():
    assert RenderProgress("probing").fraction is None
    assert RenderProgress("rendering", 601, 600).fraction == 1.0
    assert RenderProgress("rendering", 1, 3).fraction == 0.3333


@pytest.mark.parametrize(
    "seconds, text",
    [(0, "0 s"), (0.2, "1 s"), (59.5, "1 min 0 s"), (72, "1 min 12 s"), (3599, "59 min 59 s"), (7500, "2 h 05 min")],
)
def test_eta_text_rounds_up(seconds, text):
    assert eta_text(seconds) == text


def test_speed_meter_measures_over_a_sliding_window():
    clock = Clock()
    meter = SpeedMeter(window_s=5.0, min_span_s=1.0, clock=clock)
    assert meter.add(0) is None
    clock.now += 0.5
    assert meter.add(10) is None  # half a second is too short to call it a speed
    clock.now += 0.5
    assert meter.add(20) == pytest.approx(20.0)
    for _ in range(10):  # a stall of 5 s (workers starting, an approval pause) ...
        clock.now += 0.5
        meter.add(20)
    for frames in (80, 140, 200, 260, 320, 380, 440, 500, 560, 620):  # ... then 120 fps
        clock.now += 0.5
        fps = meter.add(frames)
    assert fps == pytest.approx(120.0)  # the window no longer remembers the stall


def test_record_fields_round_trip_through_the_registry_shape():
    rec = record(**ENCODING.fields())
    assert RenderProgress.of(rec) == ENCODING


def record(status="working", **fields):
    values = {
        "task_id": "task_x",
        "principal": "alice",
        "status": status,
        "phase": "rendering",
        "request": RenderRequest(
            source_asset_uri="vidforge://assets/a_1",
            output_format="mp4",
            resolution="720p",
            watermark=Watermark(image_asset_uri="vidforge://assets/a_2"),
        ),
        "status_message": "Render queued; encoding starts shortly.",
        "created_at_ms": 0,
        "last_updated_at_ms": 0,
        "ttl_ms": 1,
        "poll_interval_ms": 500,
    }
    return TaskRecord.model_validate({**values, **fields})


def test_views_show_live_progress_on_both_surfaces():
    rec = record(**ENCODING.fields())
    caller = views.Caller(principal="alice", tasks=True)
    assert views.detailed_task(rec, caller, retention_s=1)["statusMessage"] == ENCODING.message()
    status = views.render_status(rec, retention_s=1)
    assert status["progress"] == ENCODING.fraction and status["status_message"] == ENCODING.message()
    assert set(status) <= {
        "render_id",
        "state",
        "terminal",
        "poll_after_ms",
        "progress",
        "status_message",
        "expires_at",
        "terminal_states",
        "follow_up",
    }  # outputSchema: no extra properties


def test_views_keep_the_contract_message_while_awaiting_approval():
    rec = record(
        status="input_required",
        phase="awaiting_watermark_approval",
        pending=PendingApproval(key="watermark-approval-1", deadline_ms=1_785_335_762_000, timeout_s=1800),
        **{k: v for k, v in ENCODING.fields().items() if k != "phase"},
    )
    caller = views.Caller(principal="alice", tasks=True, elicitation=frozenset({ElicitationMode.FORM}))
    assert views.detailed_task(rec, caller, retention_s=1)["statusMessage"] == (
        "Waiting for user approval of the watermark preview at "
        "vidforge://renders/task_x/watermark-preview.png. Unanswered approvals time out after 30 minutes."
    )
    status = views.render_status(rec, retention_s=1)
    assert status["status_message"] == "Waiting for watermark approval; times out 2026-07-29T14:36:02Z."
    assert status["progress"] == ENCODING.fraction  # frames still count while the decision is pending


def test_a_render_about_to_end_asks_for_its_next_poll_when_it_expects_to_end():
    # 300 frames at 30 fps, 240 encoded at the last report: 2 s of encoding left, then the mux.
    rec = record(
        phase="rendering", frames_done=240, frames_total=300, fps=30.0, poll_interval_ms=10_000, last_updated_at_ms=0
    )
    assert poll_interval_ms(rec, now_ms=0) == 2_000 + MUX_ALLOWANCE_MS
    assert poll_interval_ms(rec, now_ms=1_500) == 500 + MUX_ALLOWANCE_MS  # the time since the report counts
    assert poll_interval_ms(rec, now_ms=60_000) == END_POLL_MIN_MS  # late: soon, but never a tight loop
    far = rec.model_copy(update={"frames_done": 0})
    assert poll_interval_ms(far, now_ms=0) == 10_000  # 10 s of encoding left: the task's own interval
    muxing = rec.model_copy(update={"phase": "muxing", "frames_done": 300, "fps": None})
    assert poll_interval_ms(muxing, now_ms=0) == max(END_POLL_MIN_MS, MUX_ALLOWANCE_MS)
    unmeasured = rec.model_copy(update={"fps": None})
    assert poll_interval_ms(unmeasured, now_ms=0) == 10_000
    waiting = record(
        status="input_required",
        phase="awaiting_watermark_approval",
        pending=PendingApproval(key="watermark-approval-1", deadline_ms=1, timeout_s=1800),
        frames_done=299,
        frames_total=300,
        fps=30.0,
        poll_interval_ms=30_000,
    )
    assert poll_interval_ms(waiting, now_ms=0) == 30_000  # awaiting a person: the lengthened interval stands
    # Both task surfaces ask for it.
    caller = views.Caller(principal="alice", tasks=True)
    soon = rec.model_copy(update={"last_updated_at_ms": now_ms()})
    assert 500 <= views.detailed_task(soon, caller, retention_s=1)["pollIntervalMs"] <= 2_000 + MUX_ALLOWANCE_MS
    assert 500 <= views.render_status(soon, retention_s=1)["poll_after_ms"] <= 2_000 + MUX_ALLOWANCE_MS
