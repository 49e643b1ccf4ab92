"""A finished video's quality check as the client reads and shows it: the verdict, its reasons and the report's main
figures (loudness, PSNR and SSIM), from a render's result (the report under `_meta`, the contact sheet as its `image`
block) or from the renders listing's `qc`.

Read as mcp_protocol.answers reads every answer, leniently: a field this client does not know is ignored and the
verdict is text, so the report of a newer server still reads (mcp_protocol.quality.QcReport is the server's own,
strict shape of it). A render without a check carries none of it, and shows nothing of it.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path

from mcp_types import CallToolResult, ImageContent
from pydantic import BaseModel, ConfigDict

from mcp_protocol.answers import RenderItem
from mcp_protocol.quality import QC_META_KEY
from vidforge_client.failures import ClientFailure, ExitCode, read_as

SHEET_TYPE = "image/jpeg"  # the contact sheet is the result's one JPEG image block
SHEET_SUFFIX = ".contact-sheet.jpg"


class _Lenient(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class LoudnessAnswer(_Lenient):
    integrated_lufs: float
    true_peak_dbtp: float | None = None


class FidelityAnswer(_Lenient):
    psnr_y_db: float
    ssim: float


class QualityAnswer(_Lenient):
    """The quality check's report (mcp_protocol.quality.QcReport), as far as the client shows it."""

    verdict: str  # pass | warn | fail
    reasons: list[str] = []
    loudness: LoudnessAnswer | None = None  # null: the video has no audio
    fidelity: FidelityAnswer | None = None  # null: nothing was compared

    def lines(self) -> list[str]:
        """The verdict, then each reason on a line of its own."""
        return [f"quality check: {self.verdict}", *(f"  - {reason}" for reason in self.reasons)]

    def figures(self) -> list[tuple[str, str]]:
        """The report's main figures, named, where it has them."""
        rows = []
        if (loudness := self.loudness) is not None:
            peak = f", true peak {loudness.true_peak_dbtp:g} dBTP" if loudness.true_peak_dbtp is not None else ""
            rows.append(("loudness", f"{loudness.integrated_lufs:g} LUFS{peak}"))
        if (fidelity := self.fidelity) is not None:
            rows.append(("fidelity", f"PSNR {fidelity.psnr_y_db:.2f} dB, SSIM {fidelity.ssim:.3f}"))
        return rows


class CheckedRender(RenderItem):
    """A render as `GET /renders` lists it and `GET /renders/{render_id}` shows it, with its video's quality report
    (`qc`: only for a finished video that was checked)."""

    qc: QualityAnswer | None = None


@dataclass(frozen=True)
class ResultQuality:
    """What a render's result says about the quality of its video: the report and the contact sheet's bytes, each
    None where the result carries none (an unchecked render; a sheet the server no longer had)."""

    report: QualityAnswer | None
    sheet: bytes | None

    @classmethod
    def of(cls, result: CallToolResult, what: str) -> ResultQuality:
        """Read from `result`, the answer to `what` (ClientFailure when it carries them in another shape)."""
        meta = result.meta or {}
        report = read_as(QualityAnswer, meta[QC_META_KEY], what) if QC_META_KEY in meta else None
        images = [
            block for block in result.content if isinstance(block, ImageContent) and block.mime_type == SHEET_TYPE
        ]
        if not images:
            return cls(report, None)
        try:
            return cls(report, base64.b64decode(images[0].data, validate=True))
        except binascii.Error:
            raise ClientFailure(
                ExitCode.SERVER, f"the server's answer to {what} is not one this client reads (its image is not base64)"
            ) from None

    def save_sheet(self, video: Path) -> Path | None:
        """Write the contact sheet beside `video` (clip.720p.mp4: clip.720p.contact-sheet.jpg), whole or not at all, as
        the video is; its path, or None without a sheet."""
        if self.sheet is None:
            return None
        out = contact_sheet_path(video)
        partial = out.with_name(f".{out.name}.part")
        try:
            partial.write_bytes(self.sheet)
            os.replace(partial, out)
        finally:
            partial.unlink(missing_ok=True)
        return out


def contact_sheet_path(video: Path) -> Path:
    return video.with_name(f"{video.stem}{SHEET_SUFFIX}")
