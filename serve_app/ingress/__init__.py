"""The HTTP edge of one ingress replica: the Starlette app and its routes (MCP, assets, artifacts, OAuth metadata),
bearer/OAuth auth, Origin/Host checks, admission and request slots, the file routes, the task-record mirror, the
watermark review page (`review/`), and `RayRenderService` (the RenderService that mcp_protocol's handlers call).

May import: serve_app.rendering, serve_app.media, serve_app._config/handles and the lower rooms. Not serve_app.launch.
"""
