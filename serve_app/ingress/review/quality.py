"""A finished video's quality check as the pages show it (the watch page, and the review page once the render it
decided has finished): the verdict in words, the reasons the check gave, and its contact sheet, which each page
serves through its own capability. The template is `quality.html`, beside the pages' shared `moment.html`.

What the check found is mcp_protocol.quality's report, kept with the render's record; the sheet is a JPEG the render
stored beside the video (media_store.artifacts.contact_sheet_key). A render checked before the sheet was kept, or
whose sheet is gone, shows its verdict without one; a render with no report shows nothing of either.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp_protocol.domain import Succeeded, TaskRecord
from mcp_protocol.quality import QcReport, Verdict

CONTACT_SHEET = "contact-sheet.jpg"  # the file route's name on both pages, as the wire names the resource
HEADLINES = {
    Verdict.PASS: "Nothing wrong was found.",
    Verdict.WARN: "Something is worth a look before you use the video.",
    Verdict.FAIL: "A fault was found: look at it before you use the video.",
}


def quality_report(rec: TaskRecord) -> QcReport | None:
    """The report of `rec`'s finished video; None while it renders, when it ended without a video, or unchecked."""
    return rec.end.artifact.qc if isinstance(rec.end, Succeeded) else None


@dataclass(frozen=True)
class QualityView:
    """What the pages say about the check: `verdict` (pass | warn | fail, which also picks the notice's colour), a
    `headline` in words, the check's `reasons`, and whether a contact sheet is there to show (`sheet`)."""

    verdict: str
    headline: str
    reasons: list[str]
    sheet: bool

    @classmethod
    def of(cls, report: QcReport, sheet: bool) -> QualityView:
        return cls(report.verdict.value, HEADLINES[report.verdict], list(report.reasons), sheet)
