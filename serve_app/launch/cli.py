"""`vidforge` command line: `vidforge serve` and `vidforge assets add PATH` (architecture: operator interface), and the
client's commands (`render`, `assets list`, `renders list|get`, `webhooks list`: the vidforge_client package)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from importlib.metadata import version

from serve_app.launch._state_migrate import register_state_commands
from serve_app.launch._webhook_secret import register_webhook_secret
from vidforge_client.commands import register_client_commands

# The server's modules (settings, Ray, PyAV) are imported by the commands that run them, so the client's commands,
# `--help` and `--version` answer without the seconds those imports take.


def _serve(args: argparse.Namespace) -> int:
    from media_store.private_files import make_private_dirs
    from serve_app._config import Config
    from serve_app.observability.process import observe_process

    config = Config.from_env(host=args.host, port=args.port, data_dir=args.data_dir, ray_address=args.ray_address)
    observe_process(config)
    from serve_app.launch._metrics_endpoint import METRICS_ERRORS, check_metrics_port, start_metrics_endpoint
    from serve_app.launch._port_check import PortUnavailable, check_port
    from serve_app.launch._startup import (
        SETTINGS_ERRORS,
        check_media_from_worker,
        check_settings,
        start_backend,
        wait_for_warm_pool,
    )

    try:
        media = check_settings(config)
        if not config.ray_address:  # a Ray of its own: nothing of this server can hold the ports yet
            check_port(config.host, config.port)
            check_metrics_port(config)
    except (*SETTINGS_ERRORS, *METRICS_ERRORS, PortUnavailable) as exc:
        print(f"vidforge: {exc}", file=sys.stderr)
        return 2
    make_private_dirs(config.data_dir)  # 0700 where made here (media_store.private_files)
    make_private_dirs(config.state_dir or config.data_dir)

    import ray

    from serve_app.launch._job_env import job_runtime_env
    from serve_app.launch._ray_env import apply_ray_env_defaults
    from serve_app.launch._ray_watch import RayWatch
    from serve_app.launch.deployment import deploy

    apply_ray_env_defaults()  # before ray.init: an embedded cluster's processes inherit this environment
    ray.init(
        # Unset: an embedded Ray of its own. Not None: `ray.init(address=None)` joins the last cluster `ray start`
        # made on this host (Ray reads /tmp/ray/ray_current_cluster), which is not what RAY_ADDRESS unset says.
        address=config.ray_address or "local",
        namespace=config.namespace,
        include_dashboard=False,
        log_to_driver=False,
        # The embedded node's own Prometheus endpoint (Ray's metrics); a joined cluster's nodes have theirs.
        _metrics_export_port=None if config.ray_address else config.metrics_export_port,
        runtime_env=job_runtime_env(config),  # what the job's workers on every node need (serve_app.launch._job_env)
    )
    print(f"vidforge: Ray cluster at {ray.get_runtime_context().gcs_address}", flush=True)
    ray_watch = RayWatch.of_connected(joined=bool(config.ray_address), gcs_grace_s=config.gcs_grace_s)
    try:
        check_media_from_worker(media)
        metrics_url = start_metrics_endpoint(config)  # before the registry and supervisor, which report to it
    except (*SETTINGS_ERRORS, *METRICS_ERRORS) as exc:
        print(f"vidforge: {exc}", file=sys.stderr, flush=True)
        ray.shutdown()
        return 2
    state = config.registry_settings().state_location  # a database URL without its password
    print(f"vidforge: media in {media.description}; registry state in {state}", flush=True)
    removed = start_backend(config, media)
    if any(removed.values()):
        print(f"vidforge: removed crash leftovers: {removed}", flush=True)
    # Ours from here on (ray.init installs its own): a stop request must reach the clean shutdown below,
    # including one sent the moment the URL is printed.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        deploy(config)
    except PortUnavailable as exc:
        print(f"vidforge: {exc}", file=sys.stderr, flush=True)
        ray.shutdown()
        return 2
    wait_for_warm_pool(config)
    metrics = f"{metrics_url} (Prometheus; series vidforge_*)" if metrics_url else "off (VIDFORGE_METRICS)"
    print(f"vidforge metrics: {metrics}", flush=True)
    print(f"vidforge MCP endpoint: http://{config.host}:{config.port}/mcp", flush=True)
    if config.oauth_issuer:
        print(f"vidforge OAuth resource: {config.resource} (issuer {config.oauth_issuer})", flush=True)
    ray_watch.until(stop)  # or exits 3, saying so, when Ray dies under the server
    print("vidforge: shutting down", flush=True)
    from ray import serve

    serve.shutdown()
    ray.shutdown()
    return 0


def _assets_add(args: argparse.Namespace) -> int:
    from media_store.opening import StorageUrlError
    from render_kernels.errors import UnsupportedMedia
    from serve_app._config import Config
    from serve_app.ingress.auth import LOCAL_PRINCIPAL
    from serve_app.media.assets import AssetQuotaExceeded, AssetStore, AssetTooLarge
    from serve_app.media.media_limits import refusal_reason

    config = Config.from_env(data_dir=args.data_dir)
    try:
        store = AssetStore(config)
    except StorageUrlError as exc:
        print(f"vidforge: {exc}", file=sys.stderr)
        return 2
    try:
        asset = store.add_file(args.path, args.principal or LOCAL_PRINCIPAL)
    except FileNotFoundError:
        print(f"vidforge: no such file: {args.path}", file=sys.stderr)
        return 2
    except UnsupportedMedia as exc:  # the operator's own file: the full reason, limit settings named
        print(f"vidforge: rejected {args.path}: {refusal_reason(exc)}", file=sys.stderr)
        return 2
    except (AssetTooLarge, AssetQuotaExceeded) as exc:
        print(f"vidforge: rejected {args.path}: {exc}", file=sys.stderr)
        return 2
    print(f"{asset.kind} {asset.size_bytes} bytes")
    print(asset.uri)
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="vidforge", description="vidforge: an MCP server that renders videos on Ray.")
    root.add_argument("--version", action="version", version=f"vidforge {version('vidforge')}")
    sub = root.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="start (or join) Ray and serve MCP at http://HOST:PORT/mcp")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--data-dir", default=None, help="default: $VIDFORGE_DATA_DIR or .vidforge")
    serve.add_argument("--ray-address", default=None, help="join this Ray cluster (default: $RAY_ADDRESS or local)")
    serve.set_defaults(func=_serve)

    assets = sub.add_parser("assets", help="manage source assets").add_subparsers(dest="assets_command", required=True)
    add = assets.add_parser("add", help="probe and store a video or image; prints its vidforge://assets/<id> URI")
    add.add_argument("path")
    add.add_argument("--data-dir", default=None)
    add.add_argument("--principal", help="owner of the asset (a principal of the tokens file; default: the local one)")
    add.set_defaults(func=_assets_add)
    webhooks = register_client_commands(sub, assets)  # render, assets|webhooks list, renders list|get: vidforge_client
    register_webhook_secret(webhooks)  # webhooks secret: serve_app/launch/_webhook_secret.py
    register_state_commands(sub)  # state migrate: serve_app/launch/_state_migrate.py
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
