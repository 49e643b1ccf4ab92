"""The `vidforge` client: render a file from the shell against a running vidforge server, and list one's assets and
renders. It speaks MCP through the official `mcp` SDK and the plain-HTTP routes through httpx2 (the SDK's own HTTP
library), and imports no Ray: it runs wherever the runtime install does.

    tasks       the io.modelcontextprotocol/tasks extension for the SDK client (also what examples/ use)
    transfers   upload, download and listings over HTTP
    progress    a render's figures, read from the task's status message, as a live bar or plain lines
    render      `vidforge render`: the whole round trip, approval included
    listing     `vidforge assets list`, `vidforge renders list|get`
    commands    the sub-commands, their exit codes and their one-line failures
    address, failures, interrupt: where the server is, how a command ends, what Ctrl-C does
"""
