"""vidforge mcp_protocol."""
