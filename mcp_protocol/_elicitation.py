"""The watermark approval as an `elicitation/create` in a task's `inputRequests` (contract §3.3), in the mode the
request declared.

Core 2026-07-28 `ClientCapabilities.elicitation` names the modes a client supports, `form` and `url`; an empty
object means form, the default mode. ext-tasks: the server MUST NOT put in `inputRequests` a request the client did
not declare, and the capabilities are those of this request ([1.negotiated-caps]). So, per request:

- `url` declared, and the server has a review link for the task → URL mode (`ElicitRequestURLParams`: `mode`,
  `url`, `message`): the client shows the link, the person opens the review page and decides there, out of band.
  Preferred over form when both are declared: the page shows the preview image itself at the output resolution
  (a form's message can only name a `vidforge://` resource the client may not render), and the decision is then
  taken by the person on the server's own page rather than relayed through the form's content.
- else `form` declared (or the empty object) → the contract's form, unchanged.
- else none: the status message names `vidforge_approve_watermark` instead.

In URL mode the client's `accept` means the person went to the page, not that the watermark was approved: the answer
carries no decision and is taken as none (`tasks.approval_answer`); the task leaves `input_required` when the person
decides on the page. 2026-07-28 retired `notifications/elicitation/complete` (and `elicitationId` with it), so the
task's own status is the completion signal, on `tasks/get` and `notifications/tasks`.
"""

from __future__ import annotations

from enum import StrEnum

from mcp_protocol.catalog import preview_uri
from mcp_protocol.domain import TaskRecord
from mcp_protocol.json_types import JSONObject
from mcp_protocol.timefmt import duration_text


class ElicitationMode(StrEnum):
    FORM = "form"
    URL = "url"


def declared_modes(elicitation: object) -> frozenset[ElicitationMode]:
    """The modes a request's `clientCapabilities.elicitation` declares (the empty object: form)."""
    if not isinstance(elicitation, dict):
        return frozenset()
    if not elicitation:
        return frozenset({ElicitationMode.FORM})
    return frozenset(mode for mode in ElicitationMode if mode.value in elicitation)


def approval_mode(declared: frozenset[ElicitationMode], review_url: str | None) -> ElicitationMode | None:
    """The mode the approval is asked in: URL when declared and there is a link, else form when declared, else none."""
    if ElicitationMode.URL in declared and review_url is not None:
        return ElicitationMode.URL
    return ElicitationMode.FORM if ElicitationMode.FORM in declared else None


def _watermark_terms(rec: TaskRecord) -> str:
    watermark = rec.request.watermark
    position, opacity = (watermark.position, watermark.opacity) if watermark else ("bottom_right", 1.0)
    return f"{position}, opacity {opacity:g}"


def form_request(rec: TaskRecord, review_url: str | None) -> JSONObject:
    """The form `elicitation/create` of contract §3.3; its message names the review page too, when there is one."""
    in_browser = f"; open {review_url} to see it in a browser" if review_url is not None else ""
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": f"Approve this watermark? Preview: {preview_uri(rec.task_id)} ({_watermark_terms(rec)})"
            f"{in_browser}. Rejecting ends the render.",
            "requestedSchema": {
                "type": "object",
                "required": ["approved"],
                "properties": {
                    "approved": {
                        "type": "boolean",
                        "description": "true to continue the render with this watermark; false to reject and end it.",
                    },
                    "note": {
                        "type": "string",
                        "description": "Optional reason or requested adjustment when rejecting.",
                    },
                },
            },
        },
    }


def url_request(rec: TaskRecord, review_url: str) -> JSONObject:
    """The URL-mode `elicitation/create`: the review page, and why the person should open it (naming the preview's
    resource too, for a client that shows resources itself)."""
    pending = rec.pending
    window = f" within {duration_text(pending.timeout_s)}" if pending is not None else ""
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "url",
            "url": review_url,
            "message": f"Review the watermark preview on this page and approve or reject it{window}: "
            f"{preview_uri(rec.task_id)} ({_watermark_terms(rec)}). Rejecting ends the render.",
        },
    }


def approval_request(rec: TaskRecord, mode: ElicitationMode, review_url: str | None) -> JSONObject:
    """The `elicitation/create` for `rec`'s outstanding approval in `mode` (URL mode needs the link)."""
    if mode is ElicitationMode.URL:
        assert review_url is not None, "approval_mode chooses URL mode only with a link"
        return url_request(rec, review_url)
    return form_request(rec, review_url)
