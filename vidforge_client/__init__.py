"""The `vidforge` client: render a file from the shell against a running vidforge server, and list one's assets,
renders and webhook deliveries. It speaks MCP through the official `mcp` SDK and the plain-HTTP routes through httpx2
(the SDK's own HTTP library), and reads the server's answers into mcp_protocol's models (mcp_protocol.answers).

A room of its own: it imports only mcp_protocol (the wire) and third-party libraries, never the server (serve_app),
its actors, the media store, the kernels or Ray (pyproject.toml's import contracts hold it to that). The `vidforge`
command (serve_app/launch/cli.py) registers its commands beside the server's own.

    tasks       the io.modelcontextprotocol/tasks extension for the SDK client (also what examples/ use)
    transfers   upload, download and listings over HTTP
    progress    a render's figures, read from the task's status message, as a live bar or plain lines
    render      `vidforge render`: the whole round trip, approval included
    listing     `vidforge assets list`, `vidforge renders list|get`, `vidforge webhooks list`
    quality     a finished video's quality check: its verdict, reasons and figures, and its contact sheet
    commands    the sub-commands, their exit codes and their one-line failures
    address, failures, interrupt: where the server is, how a command ends, what Ctrl-C does
"""
