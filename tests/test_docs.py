"""The documentation stays true to the project: every relative link of README.md and docs/ resolves (files and
#anchors) and stays inside the repository, every command the README shows is one the project has (make targets
and variables, `vidforge` sub-commands and flags, HTTP routes, MCP tools), every setting of serve_app/_config.py is
documented on docs/operating.md with its default, and no page names a setting that does not exist.

The fast tests read the pages and the project's own parsers; the two marked `ray` run the README's shell recipes,
as written, against a live server."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import av
import pytest
from starlette.routing import compile_path

from serve_app._config import Config
from serve_app.launch.cli import parser as vidforge_parser
from tests.harness import REPO, TOOL_NAMES
from tests.media import make_clip
from vidforge_client.address import SERVER_VARIABLE, TOKEN_VARIABLE

README = REPO / "README.md"
OPERATING = REPO / "docs" / "operating.md"
CONNECT = REPO / "docs" / "connect.md"
PAGES = [README, REPO / "CHANGELOG.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
DOC_ADDRESS = "127.0.0.1:8000"
# The variables a person sets for the client side (`vidforge render`, the example), which Config does not read.
CLIENT_VARIABLES = {SERVER_VARIABLE, TOKEN_VARIABLE}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def page_id(path: Path) -> str:
    return str(path.relative_to(REPO))


def prose(text: str) -> str:
    """The page without its code: fenced blocks and inline code spans are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def code_blocks(text: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == language]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: link text kept, lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return "".join(ch for ch in text if ch.isalnum() or ch in " -_").replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        if match := re.match(r"#{1,6} (.+)", line):
            base = slug(match.group(1))
            name, n = base, 0
            while name in found:  # GitHub numbers repeated headings: name, name-1, name-2
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def relative_links(path: Path) -> list[str]:
    return [link for link in LINK.findall(prose(path.read_text())) if not re.match(r"[a-z][a-z0-9+.-]*:", link)]


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_resolves_inside_the_repository(page):
    assert page.exists(), f"{page_id(page)} is missing"
    for link in relative_links(page):
        target, _, anchor = link.partition("#")
        resolved = (page.parent / target).resolve() if target else page
        assert resolved.is_relative_to(REPO), f"{page_id(page)}: {link} points outside the repository"
        assert resolved.exists(), f"{page_id(page)}: {link} names a file that does not exist"
        if anchor:
            assert resolved.suffix == ".md", f"{page_id(page)}: {link}: an anchor into a file that is not a page"
            assert anchor in anchors(resolved), f"{page_id(page)}: {link}: no heading of {target or 'this page'} has it"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_path_on_a_page_leads_out_of_the_repository(page):
    """Written paths too (in code, not only links): a `../something` must stay inside the repository."""
    for path in re.findall(r"(?:\.\./)+[\w.-][\w./-]*", page.read_text()):
        resolved = (page.parent / path).resolve()
        assert resolved.is_relative_to(REPO) and resolved.exists(), f"{page_id(page)}: {path} leads outside"


def test_every_page_says_who_it_is_for():
    for page in sorted((REPO / "docs").glob("*.md")):
        lines = page.read_text().splitlines()
        assert lines[0].startswith("# "), f"{page_id(page)} starts with its title"
        assert lines[2].startswith("*For "), f"{page_id(page)}: the line under the title says who the page is for"


def test_the_readme_is_a_quickstart():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    for heading in ("## Prerequisites", "## Set up", "## Your first render, from the shell", "## From `curl`"):
        assert f"\n{heading}\n" in text, heading
    assert "## From an agent" in text and "## Documentation" in text
    # issue numbers and measurement notes live on docs/performance.md and in CHANGELOG.md only
    for page in [README, *sorted((REPO / "docs").glob("*.md"))]:
        if page.name != "performance.md":
            assert not re.search(r"\bissue \d+|\(#\d+\)|#\d+\b", prose(page.read_text())), page_id(page)


def block_commands(text: str) -> list[str]:
    """The command lines of a page's `sh` blocks: continuations joined, comments dropped."""
    lines = []
    for block in code_blocks(text, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            lines.append(re.sub(r"\s+#.*$", "", line).strip())
    return [line for line in lines if line]


def inline_commands(text: str) -> list[str]:
    """The inline code spans of a page's prose that start with a command name (`make test-fast`, `vidforge render`)."""
    return [span for span in INLINE_CODE.findall(prose_without_fences(text)) if re.match(r"(make|vidforge) ", span)]


def shown_commands(text: str) -> list[str]:
    return block_commands(text) + inline_commands(text)


def prose_without_fences(text: str) -> str:
    return FENCE.sub("", text)


def invocations(lines: list[str], command: str) -> list[list[str]]:
    """The argument lists given to `command` (also as .venv/bin/command) in `lines`, up to a shell operator."""
    found = []
    for line in lines:
        for match in re.finditer(rf"(?:^|[\s;|&(])(?:\.venv/bin/)?{command} ([^|;&)]*)", line):
            found.append(shlex.split(match.group(1)))
    return found


def test_every_make_command_of_the_readme_is_a_target_of_the_makefile():
    """`make -n` (print, do not run) takes each one, and every VAR=value it gives reaches the commands."""
    calls = invocations(shown_commands(README.read_text()), "make")
    assert {args[0] for args in calls} >= {"serve", "test", "test-fast"}, calls
    for args in calls:
        dry = subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0, f"make {' '.join(args)}: {dry.stderr}"
        for assignment in (arg for arg in args if "=" in arg):
            assert assignment.split("=", 1)[1] in dry.stdout, f"make {' '.join(args)}: {assignment} is not used"


def subcommand_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """`parser` and every sub-command parser below it."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += subcommand_parsers(sub)
    return found


def test_every_vidforge_command_line_of_the_readme_parses(capsys):
    """Each command line of the README's `sh` blocks is given to the CLI's own argument parser as written: an
    unknown sub-command, flag or choice, or a missing argument, fails here."""
    calls = invocations(block_commands(README.read_text()), "vidforge")
    assert calls
    for args in calls:
        try:
            vidforge_parser().parse_args(args)
        except SystemExit as exc:  # --help prints and exits 0; a bad command exits 2
            assert exc.code == 0, f"vidforge {' '.join(args)}: {capsys.readouterr().err}"


def named_parser(args: list[str]) -> argparse.ArgumentParser:
    """The (sub-)command parser `args` name (`render`, `renders get`, ...), every flag on the way checked."""
    parser = vidforge_parser()
    for word in args:
        commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if word.startswith("-"):
            assert word in parser._option_string_actions, f"vidforge {' '.join(args)}: no {word}"
        elif commands:
            assert word in commands[0].choices, f"vidforge {' '.join(args)}: no sub-command {word}"
            parser = commands[0].choices[word]
    return parser


def test_every_vidforge_command_the_readme_names_exists():
    """The commands named in prose (`vidforge assets list`, `vidforge renders get RENDER_ID`, ...)."""
    calls = invocations(inline_commands(README.read_text()), "vidforge")
    assert {args[0] for args in calls} >= {"render", "assets", "renders"}, calls
    for args in calls:
        named_parser(args)


def test_every_flag_the_readme_names_is_a_flag_of_vidforge():
    """The options listed in prose (`--format mp4|webm|mov`, `-o OUT`, ...)."""
    flags = {flag for sub in subcommand_parsers(vidforge_parser()) for flag in sub._option_string_actions}
    spans = [span for span in INLINE_CODE.findall(prose_without_fences(README.read_text())) if span.startswith("-")]
    assert spans
    for span in spans:
        for flag in re.findall(r"(?:^|\s)(--?[a-z][\w-]*)", span):
            assert flag in flags, f"README: `{span}`: vidforge has no {flag}"


def test_vidforge_help_runs_from_the_installed_command():
    """The command the README puts on PATH runs, and `vidforge render --help` shows the exit codes the README sends
    the reader to (one process: the parser checks above cover the other sub-commands in-process)."""
    vidforge = Path(sys.executable).parent / "vidforge"
    shown = subprocess.run([str(vidforge), "render", "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "exit codes" in shown.stdout


def served_routes() -> list[str]:
    """The route paths the ingress declares (serve_app/ingress/, Starlette `Route("...")`)."""
    sources = (REPO / "serve_app" / "ingress").rglob("*.py")
    return [path for source in sources for path in re.findall(r'Route\(\s*"(/[^"]*)"', source.read_text())]


def test_every_url_the_readme_calls_is_a_route_of_the_server():
    patterns = [compile_path(path)[0] for path in served_routes()]
    urls = re.findall(rf"http://{re.escape(DOC_ADDRESS)}(/[^\s\"'?]*)", "\n".join(shown_commands(README.read_text())))
    assert {"/assets", "/mcp"} <= set(urls), urls
    for url in urls:
        path = re.sub(r"\$\{?\w+\}?", "x", url)  # a shell variable stands for one path segment's value
        assert any(pattern.match(path) for pattern in patterns), f"README calls {url}: no route serves it"


def test_every_tool_the_readme_calls_exists():
    called = set(re.findall(r"\bvidforge_[a-z_]+\b", "\n".join(code_blocks(README.read_text(), "sh"))))
    assert called and called <= set(TOOL_NAMES), called - set(TOOL_NAMES)


def test_the_readme_host_config_is_the_one_connect_md_runs():
    """tests/test_connect.py runs docs/connect.md's block with real hosts; the README shows the same one."""
    (readme_block,) = code_blocks(README.read_text(), "json")
    (connect_block,) = code_blocks(CONNECT.read_text(), "json")
    assert json.loads(readme_block) == json.loads(connect_block)


def settings() -> dict[str, object]:
    """Every environment variable serve_app/_config.py reads, with its default."""
    found = {}
    for name, field in Config.model_fields.items():
        alias = field.validation_alias
        found[alias if isinstance(alias, str) else f"VIDFORGE_{name.upper()}"] = field.default
    return found


def documented_defaults(text: str) -> dict[str, str]:
    """`| `NAME` (DEFAULT) | ...` table rows: each setting's name and the default the page gives it."""
    return dict(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \(([^|]*?)\) \|", text, re.M))


def reads_as(default: object, written: str) -> bool:
    """Whether the page's `written` default (its first word, before any `=` or `:` gloss) is `default`."""
    head = re.split(r"[:=]", written)[0].strip().strip("`")
    if default is None:
        return head.startswith("unset")
    if isinstance(default, bool):
        return head in (("true", "on") if default else ("false", "off"))
    if isinstance(default, int | float):
        return float(head) == default
    return head == default or (default == "" and head.startswith("empty"))


def test_every_setting_is_documented_on_the_operating_page_with_its_default():
    documented = documented_defaults(OPERATING.read_text())
    for name, default in settings().items():
        assert name in documented, f"docs/operating.md has no row for {name}"
        assert reads_as(default, documented[name]), (
            f"docs/operating.md: {name} ({documented[name]}), default {default!r}"
        )


def test_no_page_names_a_setting_that_does_not_exist():
    known = set(settings()) | CLIENT_VARIABLES
    for page in PAGES:
        named = {name for name in re.findall(r"VIDFORGE_[A-Z0-9_]*[A-Z0-9]\b", page.read_text())}
        assert named <= known, f"{page_id(page)} names {sorted(named - known)}"


# The README's recipes, run as written against a live server (a new shell in a folder holding clip.mp4).


def readme_recipe(marker: str) -> str:
    """The README's `sh` block that holds `marker`."""
    (block,) = [block for block in code_blocks(README.read_text(), "sh") if marker in block]
    return block


def run_recipe(script: str, server, folder: Path) -> subprocess.CompletedProcess:
    """`script` in a new bash in `folder`, with the README's server address pointed at `server`."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # as the README's `export PATH` leaves it
        "HOME": str(folder),
        SERVER_VARIABLE: server.url,  # `vidforge render`'s server: the test's, not the README's :8000
    }
    return subprocess.run(
        ["bash", "-e", "-c", script.replace(DOC_ADDRESS, f"127.0.0.1:{server.port}")],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_rendered_720p(path: Path, frames: int) -> None:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert (stream.width, stream.height) == (1280, 720)
        assert sum(1 for _ in container.decode(stream)) == frames


@pytest.fixture
def clip_folder(tmp_path):
    make_clip(str(tmp_path / "clip.mp4"), seconds=1.0, width=320, height=180)
    return tmp_path


@pytest.mark.ray
def test_the_readme_curl_recipe_renders(open_server, clip_folder):
    assert shutil.which("curl") and shutil.which("jq"), "the README's curl recipe needs curl and jq"
    recipe = readme_recipe("--data-binary @clip.mp4")
    assert DOC_ADDRESS in recipe
    ran = run_recipe(recipe, open_server, clip_folder)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert_rendered_720p(clip_folder / "clip.720p.mp4", frames=30)


@pytest.mark.ray
def test_the_readme_render_command_renders(open_server, clip_folder):
    line = next(line for line in shown_commands(README.read_text()) if line.startswith("vidforge render clip.mp4"))
    ran = run_recipe(line, open_server, clip_folder)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert_rendered_720p(clip_folder / "clip.720p.mp4", frames=30)  # "writes clip.720p.mp4 beside it"
