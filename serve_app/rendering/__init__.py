"""Render orchestration: the RenderSupervisor actor, the per-render driver (plan, approval gate, segments, mux),
segment scheduling across the cluster's CPUs, and the bodies of the Ray tasks that call render_kernels.

May import: serve_app.media, serve_app._config/handles and the lower rooms. Not ingress or launch: an HTTP
request never reaches here except through the registry.
"""
