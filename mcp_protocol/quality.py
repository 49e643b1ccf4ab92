"""A finished video's quality-control report, as the wire carries it: the result's `_meta` under `QC_META_KEY`, the
resource `vidforge://videos/<id>/qc.json`, the status tool's and the listings' `qc`, and webhook events.

The shape is fixed (fields may be added, none renamed): `verdict` (`pass` | `warn` | `fail`) and `reasons` a person
can read; `black`, `frozen` and `silent` intervals in seconds of the output; `loudness` (null without audio);
`clipped_samples`; `fidelity` (null when nothing was compared: an inspection, or QC off); and the frame counts of
source and output. The render kernels measure it (render_kernels.qc); this module only says what goes out.
"""

from __future__ import annotations

import base64
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from mcp_protocol.json_types import JSONObject

QC_META_KEY = "com.vidforge/qc"


def qc_uri(render_id: str) -> str:
    return f"vidforge://videos/{render_id}/qc.json"


def contact_sheet_uri(render_id: str) -> str:
    return f"vidforge://videos/{render_id}/contact-sheet.jpg"


class _Fixed(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Verdict(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


class Interval(_Fixed):
    start_s: float
    end_s: float


class Loudness(_Fixed):
    integrated_lufs: float
    range_lu: float
    true_peak_dbtp: float


class Fidelity(_Fixed):
    psnr_y_db: float
    ssim: float
    frames_compared: int


class FrameCounts(_Fixed):
    source: int
    output: int


class QcReport(_Fixed):
    verdict: Verdict
    reasons: list[str]
    black: list[Interval]
    frozen: list[Interval]
    silent: list[Interval]
    loudness: Loudness | None
    clipped_samples: int
    fidelity: Fidelity | None
    frames: FrameCounts

    def to_json(self) -> JSONObject:
        return self.model_dump(mode="json")

    def summary(self) -> JSONObject:
        """The verdict and its reasons: what the text content and a status line carry."""
        return {"verdict": self.verdict.value, "reasons": list(self.reasons)}

    def sentence(self) -> str:
        """One line a person can read: "QC pass." or "QC warn: black for 1.0 s at 0:02.0; …"."""
        if not self.reasons:
            return f"QC {self.verdict.value}."
        return f"QC {self.verdict.value}: {'; '.join(self.reasons)}."


def contact_sheet_block(jpeg: bytes) -> JSONObject:
    """The contact sheet as an MCP `image` content block: hosts that read images show it to the model."""
    return {"type": "image", "data": base64.b64encode(jpeg).decode("ascii"), "mimeType": "image/jpeg"}
