"""What an upload holds, told from its first bytes, so that a refusal says what was sent instead of a video or image.

libav calls whatever it cannot open "truncated or corrupt", which is right for a video cut short and misleading for
the commoner mistakes: a text file, a PDF, or the multipart form that `curl -F file=@clip.mp4` sends in place of
the file's bytes. `sniff` looks at the head only (magic numbers, with the `filetype` library, and whether it reads
as text); a head that is, or may be, media is left to the parsers, which decide (media_probe.inspect_media).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

import filetype

HEAD_BYTES = 8192  # filetype reads at most this much; a text test over it is a fair sample
RAW_BYTES_ADVICE = "send the file's raw bytes as the request body (`curl --data-binary @clip.mp4 …`)"
MULTIPART_FORM = "a multipart/form-data form (what `curl -F` sends)"
MEDIA_MIME_TYPES = ("video/", "image/", "audio/")  # audio: the probe names what it lacks ("no video stream")
_MULTIPART_HEAD = re.compile(rb"\A--[^\r\n]{1,200}\r?\ncontent-disposition: *form-data", re.IGNORECASE)
_TEXT_CONTROLS = frozenset("\t\n\r\f\v")


@dataclass(frozen=True)
class Sniffed:
    """What the head looks like: `description` in words where it is known; `media` unless it is surely not."""

    description: str | None
    media: bool

    def refusal(self) -> str:
        """The reason a file that is surely not media is refused with."""
        reason = f"not a video or image: the file is {self.description}"
        return f"{reason}; {RAW_BYTES_ADVICE}" if self.description == MULTIPART_FORM else reason


MULTIPART = Sniffed(MULTIPART_FORM, media=False)


def _is_text(head: bytes) -> bool:
    """UTF-8 (ASCII included) of printable characters and whitespace only; a character cut at the end is allowed."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head.removeprefix(codecs.BOM_UTF8), final=False)
    except UnicodeDecodeError:
        return False
    return bool(text) and all(char.isprintable() or char in _TEXT_CONTROLS for char in text)


def sniff(head: bytes) -> Sniffed:
    """What a file whose first bytes are `head` looks like."""
    if _MULTIPART_HEAD.match(head):
        return MULTIPART
    kind = filetype.guess(head)
    if kind is not None:
        return Sniffed(f"{kind.extension.upper()} data ({kind.mime})", media=kind.mime.startswith(MEDIA_MIME_TYPES))
    if _is_text(head):
        return Sniffed("text", media=False)
    return Sniffed(None, media=True)
