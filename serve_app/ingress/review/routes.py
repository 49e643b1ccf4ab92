"""The review page's routes, outside bearer authentication (the link's capability is the credential):

- `GET /review/{task_id}?cap=…` — the page;
- `POST /review/{task_id}` — the decision (form fields `cap`, `decision` = approve | reject, optional `note`), then
  303 back to the page (post/redirect/get), which shows it;
- `GET /review/{task_id}/preview.png?cap=…`, `…/source.png?cap=…` — the watermark preview and the source's first
  frame, through the same capability;
- `GET /review/{task_id}/contact-sheet.jpg?cap=…` — once the approved render has finished, its quality check's
  contact sheet, which the page shows with the check's verdict and a link to the video's watch page;
- `GET /review/static/{name}` — the pages' stylesheet and script (CSP `style-src 'self'; script-src 'self'`), served
  also without a review key (the front page uses the stylesheet).

A decision goes through the registry's one transition (`ReviewBackend.review_decide` → TaskRegistry.answer_input),
as `tasks/update` and `vidforge_approve_watermark` do: recorded once; the same decision again is a no-op (303, the
page shows it); a different one is refused as `approval_already_recorded` (409); none is taken once the round has
ended (410).

Cross-site posts: the form carries the capability, which another site does not have, and no cookie or other ambient
credential exists here for such a site to ride on. On top of that, a POST whose `Origin` (or, without one, whose
`Referer`) names another origin than the server's public one is refused (403). `Origin: null` is not refused on
that ground: it is what a browser sends for any POST from a `Referrer-Policy: no-referrer` page, this one included.
"""

from __future__ import annotations

import time
from typing import Protocol
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from mcp_protocol import errors
from mcp_protocol.catalog import APPROVE_TOOL
from mcp_protocol.domain import AnswerResult, ApprovalAnswer, TaskRecord
from mcp_protocol.text_limits import FREE_TEXT_MAX_CHARS
from serve_app._config import Config
from serve_app.ingress._web_origin import origin_key
from serve_app.ingress.review.capability import LinkRefused, ReviewSigner
from serve_app.ingress.review.links import CAPABILITY_PARAM, REVIEW_PATH, ReviewImage, review_path, with_capability
from serve_app.ingress.review.pages import (
    SECURITY_HEADERS,
    Moment,
    ReviewedRender,
    html_page,
    image,
    refused_page,
    static_route,
)
from serve_app.ingress.review.quality import CONTACT_SHEET, QualityView, quality_report
from serve_app.ingress.review.view import ReviewState, ReviewView, ended_undecided_text

FORM_TYPE = "application/x-www-form-urlencoded"
DECISIONS = {"approve": True, "reject": False}


class ReviewBackend(Protocol):
    """What the review routes need of the server (serve_app.ingress.ray_render_service.RayRenderService)."""

    async def review_render(self, task_id: str) -> ReviewedRender | None:
        """The render, whoever owns it (the capability was checked), from the registry itself; None once deleted."""
        ...

    async def review_decide(self, rec: TaskRecord, approved: bool, note: str | None) -> ApprovalAnswer:
        """The decision, through the registry's `answer_input` for `rec`'s principal, as `vidforge_approve_watermark`
        records it (no round key: the route has checked the link's round against the record just before)."""
        ...

    async def review_image(self, task_id: str, which: ReviewImage) -> bytes | None:
        """The stored PNG; None when there is none (not made yet, or deleted with the render)."""
        ...

    def watch_url(self, rec: TaskRecord) -> str | None:
        """The watch page of `rec`'s finished video (serve_app.ingress.watch.links); None when it has none."""
        ...

    async def contact_sheet(self, rec: TaskRecord) -> bytes | None:
        """The contact sheet JPEG of `rec`'s quality check; None without a check, or when its sheet is not stored."""
        ...


class _Refused(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


def _refusal(refused: LinkRefused) -> _Refused:
    ended = Moment.of_ms(refused.ended_s * 1000) if refused.ended_s is not None else None
    return _Refused(refused_page(refused.status, refused.title, refused.reason, ended=ended))


class ReviewRoutes:
    def __init__(self, config: Config, backend: ReviewBackend, signer: ReviewSigner) -> None:
        self.backend = backend
        self.signer = signer
        self.own_origin = origin_key(config.public_base_url)
        self.form_max_bytes = config.review_form_max_bytes
        self.note_max_chars = FREE_TEXT_MAX_CHARS  # the one bound on a note, however it comes in

    def routes(self) -> list[BaseRoute]:
        return [
            Route(REVIEW_PATH + "/{task_id}", self.review, methods=["GET", "POST"]),
            Route(REVIEW_PATH + "/{task_id}/{image}.png", self.image, methods=["GET"]),
            Route(REVIEW_PATH + f"/{{task_id}}/{CONTACT_SHEET}", self.contact_sheet, methods=["GET"]),
        ]

    async def _authorized(self, task_id: str, token: str | None) -> ReviewedRender:
        """The render `token` grants a look at: a link this server signed for this task, unexpired, for the round the
        record is on. A round superseded (the render restarted and asked again) or a render deleted is 410."""
        try:
            cap = self.signer.verify(task_id, token, time.time())
        except LinkRefused as refused:
            raise _refusal(refused) from None
        render = await self.backend.review_render(task_id)
        if render is None:
            raise _refusal(
                LinkRefused(410, "This render is no longer available", "Its records were deleted after retention.")
            )
        if render.record.input_seq != cap.round:
            raise _refusal(superseded())
        return render

    async def review(self, request: Request) -> Response:
        try:
            if request.method == "POST":
                return await self._decide(request)
            task_id = request.path_params["task_id"]
            token = request.query_params.get(CAPABILITY_PARAM)
            return await self._page(await self._authorized(task_id, token), token or "")
        except _Refused as refused:
            return refused.response

    async def _page(self, render: ReviewedRender, token: str) -> Response:
        view = ReviewView.of(render, time.time() * 1000)
        images = {
            which.value: with_capability(review_path(view.task_id, f"/{which}.png"), token) for which in ReviewImage
        }
        images[CONTACT_SHEET] = with_capability(review_path(view.task_id, f"/{CONTACT_SHEET}"), token)
        # Once the approved render has finished, the page says so with what its quality check found (the sheet only
        # when it is stored: no broken image) and where to watch the video.
        rec = render.record
        report = quality_report(rec)
        quality = QualityView.of(report, await self.backend.contact_sheet(rec) is not None) if report else None
        return html_page(
            "review.html",
            view=view,
            quality=quality,
            watch_url=self.backend.watch_url(rec) if view.finished else None,
            pending=view.state is ReviewState.PENDING,
            token=token,
            # The capability rides the URL too, so the ingress counts the post as the link's, not as anonymous.
            action=with_capability(review_path(view.task_id), token),
            images=images,
            note_max_chars=self.note_max_chars,
        )

    async def _decide(self, request: Request) -> Response:
        self._check_same_origin(request)
        form = await self._form(request)
        task_id = request.path_params["task_id"]
        token = form.get(CAPABILITY_PARAM)
        render = await self._authorized(task_id, token)
        approved = DECISIONS.get(form.get("decision", ""))
        if approved is None:
            return refused_page(400, "No decision was sent", "Choose Approve or Reject on the review page.")
        note = form.get("note", "").strip() or None
        if note is not None and len(note) > self.note_max_chars:
            return refused_page(
                422,
                "The note is too long",
                f"A note may have at most {self.note_max_chars} characters (the limit of {APPROVE_TOOL}'s note); "
                f"this one has {len(note)}. Shorten it and send the decision again.",
            )
        answer = await self.backend.review_decide(render.record, approved, note)
        back = with_capability(review_path(task_id), token or "")
        if answer.result in (AnswerResult.RECORDED, AnswerResult.REPLAYED):
            return RedirectResponse(back, status_code=303, headers=SECURITY_HEADERS)
        if answer.result is AnswerResult.CONFLICT:
            recorded = bool(answer.task and answer.task.approval and answer.task.approval.approved)
            error = errors.approval_already_recorded(task_id, recorded)
            reason = f"It was already {'approved' if recorded else 'rejected'}, and a decision cannot be changed."
            return refused_page(409, "Another decision was already made", reason, back, code=error.code)
        ended = ended_undecided_text(answer.task) if answer.task is not None else "The render was deleted."
        return refused_page(410, "This render no longer waits for a decision", ended, back)

    def _check_same_origin(self, request: Request) -> None:
        """403 for a POST that names another origin than the server's public one (see the module docstring)."""
        origin = request.headers.get("origin")
        claimed = origin if origin not in (None, "null") else request.headers.get("referer")
        if claimed is not None and origin_key(claimed) != self.own_origin:
            raise _Refused(
                refused_page(
                    403,
                    "Decision refused: sent from another site",
                    "Decisions are taken only from the review page itself. Open the review link and decide there.",
                )
            )

    async def _form(self, request: Request) -> dict[str, str]:
        """The urlencoded form, read up to VIDFORGE_REVIEW_FORM_MAX_BYTES."""
        if request.headers.get("content-type", "").partition(";")[0].strip().lower() != FORM_TYPE:
            raise _Refused(refused_page(415, "Unsupported form", f"The decision must be sent as {FORM_TYPE}."))
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.form_max_bytes:
                raise _Refused(
                    refused_page(
                        413,
                        "The form is too large",
                        f"A decision form may have at most {self.form_max_bytes} bytes "
                        "(VIDFORGE_REVIEW_FORM_MAX_BYTES). Shorten the note and send it again.",
                    )
                )
        try:
            return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=8))
        except (UnicodeDecodeError, ValueError):
            raise _Refused(refused_page(400, "Unreadable form", "The decision form could not be read.")) from None

    async def image(self, request: Request) -> Response:
        task_id = request.path_params["task_id"]
        try:
            which = ReviewImage(request.path_params["image"])
        except ValueError:
            return refused_page(404, "No such image", "The review page has a preview and a source frame only.")
        try:
            await self._authorized(task_id, request.query_params.get(CAPABILITY_PARAM))
        except _Refused as refused:
            return refused.response
        png = await self.backend.review_image(task_id, which)
        if png is None:
            return refused_page(404, "Image not available", "This image is not stored (any more) for this render.")
        return image(png)

    async def contact_sheet(self, request: Request) -> Response:
        try:
            render = await self._authorized(request.path_params["task_id"], request.query_params.get(CAPABILITY_PARAM))
        except _Refused as refused:
            return refused.response
        jpeg = await self.backend.contact_sheet(render.record)
        if jpeg is None:
            return refused_page(404, "Contact sheet not available", "No contact sheet is stored for this render.")
        return image(jpeg, "image/jpeg")


def superseded() -> LinkRefused:
    return LinkRefused(
        410,
        "This review link was replaced",
        "The render asked for approval again after this link was made. Use the link in the render's current status.",
    )


def review_routes(config: Config, backend: ReviewBackend) -> list[BaseRoute]:
    """The review routes; only the static files without a review key (a server started without the launch step
    mints no links)."""
    if not config.review_key:
        return [static_route()]
    return [static_route(), *ReviewRoutes(config, backend, ReviewSigner(config.review_key)).routes()]
