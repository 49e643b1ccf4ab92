"""Why an import did not happen, in words safe to show the caller: they name the rule, the host and the setting,
never a byte of what the remote answered (its headers and body stay out of every error and log line)."""

from __future__ import annotations


class ImportRefused(Exception):
    """vidforge will not fetch this (a rule: the scheme, an address, the redirects, the bucket), or the remote
    refused it: the same URL fails the same way (`import_refused`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)  # in `args`, so it survives Ray's pickling
        self.reason = reason


class ImportUnavailable(Exception):
    """The remote did not deliver the file, for now (`import_failed`, temporary)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
