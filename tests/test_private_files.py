"""Issue 32 item 4: what the server writes under its data dir is its owner's alone, under any umask.

A real `vidforge serve` runs under `umask 077` and under the common default `022`; an upload of a clip and of a
watermark, and a watermarked render approved through its preview, write every kind of file the server makes: the
uploads, the preview, the finished video, the registry's database (with its WAL files) and the review-link key.
Each file must be 0600 and each folder 0700 (no group or other bit), and under 077 the umask's own 0700/0600.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.harness import TERMINAL, ServerProcess, Wire, poll_task, upload
from tests.media import make_clip, make_watermark_png

pytestmark = pytest.mark.ray

TOKENS = {"tok-private-files-4b1d": "owner"}
TOKEN = next(iter(TOKENS))


def render_with_preview(server: ServerProcess, tmp_path: Path) -> None:
    """An upload of a clip and a watermark, and a watermarked render approved through its preview."""
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=1.0, width=160, height=90, audio=True)
    logo = make_watermark_png(str(tmp_path / "logo.png"), w=32, h=16)
    source, watermark = upload(server, clip, TOKEN), upload(server, logo, TOKEN)
    wire = Wire(server.url, token=TOKEN, tasks=True, elicitation=True)
    args = {
        "source_asset_uri": source,
        "output_format": "mp4",
        "resolution": "720p",
        "watermark": {"image_asset_uri": watermark, "position": "top_left", "opacity": 0.5},
    }
    task_id = wire.tool("vidforge_render_video", args)["taskId"]
    waiting = poll_task(wire, task_id, lambda t: t["status"] == "input_required")
    ((key, _),) = waiting["inputRequests"].items()
    wire.task("tasks/update", task_id, inputResponses={key: {"action": "accept", "content": {"approved": True}}})
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and not done["result"]["isError"], done
    wire.close()


def modes_under(root: Path) -> dict[str, int]:
    """The permission bits of everything under `root`, by path relative to it (folders end in /)."""
    found = {}
    for path in root.rglob("*"):
        mode = path.lstat().st_mode
        name = str(path.relative_to(root)) + ("/" if stat.S_ISDIR(mode) else "")
        found[name] = stat.S_IMODE(mode)
    return found


@pytest.mark.parametrize("umask", ["077", "022"])
def test_media_previews_videos_registry_and_key_are_the_owners_alone(tmp_path, umask):
    server = ServerProcess(tmp_path / "data", env={"VIDFORGE_POLL_INTERVAL_MS": "500"}, tokens=TOKENS)
    server.prefix = ["sh", "-c", f'umask {umask} && exec "$0" "$@"']  # Ray's processes inherit it from the server
    with server:
        render_with_preview(server, tmp_path)
        modes = modes_under(server.data_dir)
    assert {"assets/", "artifacts/", "registry.sqlite3", "registry.sqlite3-wal", "review.key"} <= set(modes), modes
    written = {Path(name).name for name in modes if name.startswith("artifacts/")}
    assert {"final.mp4", "watermark-preview.png", "source-frame.png"} <= written, modes
    opened = {name: oct(mode) for name, mode in modes.items() if mode & 0o077}
    assert not opened, f"readable by others under umask {umask}: {opened}"
    wrong = {name: oct(mode) for name, mode in modes.items() if mode != (0o700 if name.endswith("/") else 0o600)}
    assert not wrong, f"not 0700 folders and 0600 files under umask {umask}: {wrong}"
