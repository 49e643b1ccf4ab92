"""What an operator sees of a running vidforge: Prometheus metrics, structured logs, and the storage error count.

The bottom of serve_app's rooms, beside `config`: every other sub-package records into it, and the registry's
observer (built here, run inside the TaskRegistry actor) reports render states and ends. It imports only `config`
and the rooms below serve_app. Each vidforge process calls `process.observe_process(config)` once at its start.
"""
