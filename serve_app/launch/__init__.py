"""The process: `vidforge` CLI, Ray's environment and start-up, the cluster-wide actors and the Serve deployment.

The top of the house: may import every other sub-package of serve_app and every lower room; nothing imports it.
"""
