"""The client's sub-commands of `vidforge` (serve_app/launch/cli.py registers them): `render`, `assets list`,
`renders list`, `renders get` and `webhooks list`. Each runs on an event loop of its own and ends with an exit code
(`failures.ExitCode`); a failure prints one line on stderr, `vidforge: <what happened and what to do>`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, get_args

from mcp_protocol.domain import OutputFormat, Position, Resolution
from vidforge_client._interrupt import Interrupt
from vidforge_client._listing import list_items, show_render
from vidforge_client.address import DEFAULT_SERVER, SERVER_VARIABLE, TOKEN_VARIABLE, BadServerUrl, ServerAddress
from vidforge_client.failures import ClientFailure, ExitCode, failure_of

Work = Callable[[ServerAddress, Interrupt], Coroutine[Any, Any, None]]
EXIT_CODES = (
    "exit codes: 0 done; 1 the render failed, was rejected or cancelled elsewhere; 2 bad usage or input (a missing "
    "or refused file, an unwritable output, an unknown render); 3 the server is unreachable, refused the token or "
    "failed; 130 interrupted (Ctrl-C; a running render is cancelled on the server)"
)


def register_client_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    assets: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """Add `render`, `renders` and `webhooks` to `vidforge`'s sub-commands, and `list` to its `assets` sub-commands;
    returns the `webhooks` sub-commands (where the launch adds `secret`, which reads the server's own settings)."""
    server = argparse.ArgumentParser(add_help=False)
    server.add_argument("--server", help=f"the MCP endpoint (default: ${SERVER_VARIABLE} or {DEFAULT_SERVER})")
    server.add_argument("--token", help=f"bearer token from the server's tokens file (default: ${TOKEN_VARIABLE})")

    cmd = sub.add_parser(
        "render",
        parents=[server],
        help="render a video through a vidforge server, with a progress bar, and download it",
        description="Upload SOURCE (or use a vidforge://assets/… URI), render it as an MCP task, show its progress, "
        "and download the video. With --watermark, the render waits for the watermark's approval on the server's "
        "review page (the link is printed), unless --approve approves it for you. Where the server checks the "
        "video's quality, its verdict and reasons are printed and its contact sheet (frames with their times) is "
        "written beside the video as <output stem>.contact-sheet.jpg.",
        epilog=EXIT_CODES,
    )
    cmd.add_argument("source", help="a video file, or a vidforge://assets/… URI")
    cmd.add_argument("--resolution", choices=get_args(Resolution), default="720p")
    cmd.add_argument("--format", dest="output_format", choices=get_args(OutputFormat), default="mp4")
    cmd.add_argument("--watermark", help="a PNG/JPEG image file, or a vidforge://assets/… URI")
    cmd.add_argument("--position", choices=get_args(Position), default="bottom_right", help="of the watermark")
    cmd.add_argument("--opacity", type=_opacity, default=1.0, help="of the watermark, 0 to 1 (default 1)")
    cmd.add_argument("--approve", action="store_true", help="approve the watermark yourself (your own render)")
    cmd.add_argument(
        "-o", "--output", type=Path, help="where the video goes (default: beside SOURCE, e.g. clip.720p.mp4)"
    )
    cmd.set_defaults(func=_render)

    listing = argparse.ArgumentParser(add_help=False, parents=[server])
    listing.add_argument("--limit", type=_positive, help="at most this many, newest first (default: the server's page)")
    listing.add_argument("--json", action="store_true", help="print the server's JSON answer, for scripts")
    assets.add_parser("list", parents=[listing], help="list your uploaded assets", epilog=EXIT_CODES).set_defaults(
        func=_assets_list
    )

    renders = sub.add_parser("renders", help="your renders").add_subparsers(dest="renders_command", required=True)
    renders.add_parser("list", parents=[listing], help="list your renders", epilog=EXIT_CODES).set_defaults(
        func=_renders_list
    )
    get = renders.add_parser("get", parents=[server], help="show one of your renders", epilog=EXIT_CODES)
    get.add_argument("render_id")
    get.add_argument("--json", action="store_true", help="print the server's JSON answer, for scripts")
    get.set_defaults(func=_renders_get)

    webhooks = sub.add_parser("webhooks", help="your renders' webhooks").add_subparsers(
        dest="webhooks_command", required=True
    )
    webhooks.add_parser(
        "list", parents=[listing], help="list your webhook deliveries: state, attempts, last error", epilog=EXIT_CODES
    ).set_defaults(func=_webhooks_list)
    return webhooks


def _opacity(value: str) -> float:
    try:
        opacity = float(value)
    except ValueError:
        opacity = -1.0
    if not 0.0 <= opacity <= 1.0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number from 0 to 1")
    return opacity


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of at least 1")
    return int(value)


def _render(args: argparse.Namespace) -> int:
    # Here, not at the top: the MCP SDK, which only `render` uses, is most of a command's start-up.
    from vidforge_client._progress import progress_view
    from vidforge_client._render import RenderOrder, render

    order = RenderOrder(
        source=args.source,
        resolution=args.resolution,
        output_format=args.output_format,
        watermark=args.watermark,
        position=args.position,
        opacity=args.opacity,
        output=args.output,
        approve=args.approve,
    )

    async def work(address: ServerAddress, interrupt: Interrupt) -> None:
        view = progress_view()
        try:
            video = await render(order, address, view, interrupt)
        finally:
            view.close()
        print("\n".join(video.lines()))

    return run(args, work)


def _assets_list(args: argparse.Namespace) -> int:
    return run(args, lambda address, _: list_items(address, "assets", args.limit, args.json))


def _renders_list(args: argparse.Namespace) -> int:
    return run(args, lambda address, _: list_items(address, "renders", args.limit, args.json))


def _webhooks_list(args: argparse.Namespace) -> int:
    return run(args, lambda address, _: list_items(address, "webhooks", args.limit, args.json))


def _renders_get(args: argparse.Namespace) -> int:
    return run(args, lambda address, _: show_render(address, args.render_id, args.json))


def run(args: argparse.Namespace, work: Work) -> int:
    """Run one command to its exit code; a failure, whatever raised it, is one line on stderr (no traceback)."""
    try:
        address = ServerAddress.of(args.server, args.token)
    except BadServerUrl as exc:
        return _fail(ClientFailure(ExitCode.USAGE, str(exc)))
    interrupt = Interrupt()

    async def main() -> None:
        with interrupt.installed():
            await work(address, interrupt)

    try:
        asyncio.run(main())
    except (Exception, asyncio.CancelledError, KeyboardInterrupt) as exc:
        failure = failure_of(exc, address)
        if interrupt.pressed and (failure is None or failure.exit_code is not ExitCode.INTERRUPTED):
            failure = ClientFailure(ExitCode.INTERRUPTED, "interrupted")
        if failure is None:  # a fault of this client: still one line, naming it
            failure = ClientFailure(ExitCode.FAILED, f"unexpected {type(exc).__name__}: {exc} (please report it)")
        return _fail(failure)
    return ExitCode.OK


def _fail(failure: ClientFailure) -> int:
    print(f"vidforge: {failure.message}", file=sys.stderr, flush=True)
    return failure.exit_code
