"""The one error render kernels raise for media they cannot use."""


class UnsupportedMedia(Exception):
    """The input is not media this pipeline can use (empty, corrupt, truncated, wrong kind).

    `reason` is a short human-readable explanation suitable for an `unsupported_codec` error envelope.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
