"""The process: `vidforge` CLI, Ray's environment and start-up, the cluster-wide actors and the Serve deployment.

The top of the house: may import every other sub-package of serve_app and every lower room, and the client's
commands (vidforge_client), which `vidforge` registers beside its own; nothing imports it.
"""
