"""The body of one parser process (`python -m serve_app.media._parser_process`; serve_app.media.media_probe starts it).

It imports the parse kernels first, while it waits as the asking process's spare, then reads one parse from stdin:
the kernel, the media and its arguments, and the bounds. It caps its memory, parses, writes what came of it to
stdout, and ends. Anything that prints while it parses goes to stderr: stdout carries the answer alone.
"""

from __future__ import annotations

import math
import os
import pickle
import signal
import sys

from serve_app.media.media_probe import ORPHAN_GRACE_S, ParseAnswer, ParseRequest, apply_test_fault, cap_memory

ALARM_MAX_S = 2**31 - 1  # what alarm(2) takes everywhere


def main() -> None:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        request: ParseRequest = pickle.load(sys.stdin.buffer)
    except EOFError:  # the asking process ended without a parse for this spare
        return
    # Ends a parse whose asker died first; no later than an alarm can be set (a deadline past it is no deadline).
    signal.alarm(min(math.ceil(request.bounds.timeout_s) + ORPHAN_GRACE_S, ALARM_MAX_S))
    cap_memory(request.bounds.memory_bytes)
    if request.bounds.fault_prefix:
        apply_test_fault(request.path, request.bounds.fault_prefix.encode())
    try:
        answer = ParseAnswer(value=request.fn(request.path, *request.args))
    except MemoryError:
        answer = ParseAnswer(memory=True)
    except Exception as exc:  # noqa: BLE001 - the asker says what it means (parse_isolated)
        answer = ParseAnswer(raised=exc)
    pickle.dump(answer, answers)
    answers.flush()


if __name__ == "__main__":
    main()
