"""Uploaded media inside the server: vetting and storing assets, the facts kept with each (one typed model), the
isolated media parser, the media limits in force, and disk-full detection.

May import: serve_app._config/handles and the lower rooms (render_kernels, media_store, actors, mcp_protocol).
"""
