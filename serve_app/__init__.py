"""vidforge's server: the only room that wires HTTP, Ray, the registry, the media store and the kernels together.

Four sub-packages, each importing only those below it (tests/test_import_contract.py holds them to it):

    launch/     the process: CLI, Ray start-up, the Serve application, cluster-wide actors   (imports all below)
    ingress/    the HTTP edge: routes, auth, origin, admission, file routes, the RenderService the wire calls
    rendering/  render orchestration: supervisor, driver, segment scheduling, Ray task bodies
    media/      uploaded media: asset vetting, the isolated parser, limits, disk-full detection

and the leaves every sub-package may use: `_handles` (the registry actor and the media store, opened from the
settings), `observability` (metrics, structured logs, the storage error count) and `_config` (the operator's settings),
in that order downward.
"""
