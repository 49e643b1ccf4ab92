"""The operator interface that needs no running server: `cluster.yaml`, `vidforge assets add`, config."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest
import yaml

from serve_app.ingress.auth import TokenFileError, check_bind_allowed, load_tokens
from tests.harness import REPO, run_vidforge
from tests.media import make_clip, make_watermark_png


def test_cluster_yaml_parses_with_head_gpu_and_cpu_node_types():
    config = yaml.safe_load((REPO / "cluster.yaml").read_text())
    types = config["available_node_types"]
    assert config["head_node_type"] == "head"
    assert "GPU" not in types["head"]["resources"]
    assert types["gpu_worker"]["resources"]["GPU"] >= 1
    assert "GPU" not in types["cpu_worker"]["resources"]
    assert any("vidforge serve" in cmd and "--ray-address auto" in cmd for cmd in config["head_start_ray_commands"])
    assert any("pip install" in cmd for cmd in config["setup_commands"])
    for key in ("cluster_name", "provider", "auth", "max_workers"):
        assert key in config


def run_cli(*args, data_dir):
    return run_vidforge("assets", "add", *args, "--data-dir", str(data_dir), timeout=120)


@pytest.mark.slow  # `vidforge assets add` processes (each starts Python, PyAV, Ray imports)
def test_assets_add_prints_uri_last_and_rejects_unreadable_files(tmp_path):
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=1.0)
    logo = make_watermark_png(str(tmp_path / "logo.png"))
    for path, kind in ((clip, "video"), (logo, "image")):
        run = run_cli(path, data_dir=tmp_path / "data")
        assert run.returncode == 0, run.stderr
        lines = run.stdout.strip().splitlines()
        assert lines[-1].startswith("vidforge://assets/a_")
        assert lines[0].startswith(kind)
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\x00" * 1000)
    run = run_cli(str(junk), data_dir=tmp_path / "data")
    assert run.returncode == 2 and "rejected" in run.stderr
    assert run_cli(str(tmp_path / "missing.mp4"), data_dir=tmp_path / "data").returncode == 2


def test_tokens_file_rules(tmp_path):
    assert load_tokens(None) is None
    good = tmp_path / "tokens.json"
    good.write_text('{"t1": "alice"}')
    assert load_tokens(str(good)) == {"t1": "alice"}
    for bad in ("[]", "{}", '{"t": 5}', "not json"):
        path = tmp_path / "bad.json"
        path.write_text(bad)
        try:
            load_tokens(str(path))
        except TokenFileError:
            continue
        raise AssertionError(f"accepted {bad!r}")
    check_bind_allowed("127.0.0.1", None, None)
    check_bind_allowed("0.0.0.0", {"t1": "alice"}, None)
    # OAuth resource-server mode is credentials too: a hosted bind needs no tokens file beside it.
    check_bind_allowed("0.0.0.0", None, "https://auth.example.com")
    try:
        check_bind_allowed("0.0.0.0", None, None)
    except TokenFileError:
        pass
    else:
        raise AssertionError("non-loopback bind without tokens was allowed")


def serve_cli(*args, env):
    return run_vidforge("serve", *args, env=env, timeout=120)


@pytest.mark.slow  # a `vidforge serve` process (it ends before Ray starts)
def test_oauth_settings_are_checked_before_serving(tmp_path):
    env = {"VIDFORGE_DATA_DIR": str(tmp_path), "VIDFORGE_TOKENS_FILE": ""}
    refused = serve_cli("--host", "0.0.0.0", env=env)
    assert refused.returncode == 2 and "VIDFORGE_OAUTH_ISSUER" in refused.stderr
    # With OAuth the bind rule passes; these settings are refused on their own merits, before Ray starts.
    plain_http = serve_cli("--host", "0.0.0.0", env={**env, "VIDFORGE_OAUTH_ISSUER": "http://auth.example.com"})
    assert plain_http.returncode == 2 and "https" in plain_http.stderr
    with_path = serve_cli(
        env={**env, "VIDFORGE_OAUTH_ISSUER": "https://auth.example.com", "VIDFORGE_PUBLIC_URL": "https://h/x"}
    )
    assert with_path.returncode == 2 and "VIDFORGE_PUBLIC_URL" in with_path.stderr


@pytest.mark.slow  # a `vidforge serve` process (it ends before Ray starts)
def test_a_busy_port_is_one_line_naming_it_and_how_to_pick_another(tmp_path):
    """Checked before Ray starts: exit 2 at once, no traceback, the host and port named with the flag to change."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        run = serve_cli("--port", str(port), env={"VIDFORGE_DATA_DIR": str(tmp_path / "data")})
    assert run.returncode == 2, run.stderr[-4000:]
    assert "Traceback" not in run.stdout + run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert f"127.0.0.1:{port} is already in use" in line
    assert "vidforge serve --port N" in line and "make serve PORT=N" in line


def make_dry_run(*args: str) -> list[str]:
    """The commands `make ARGS` would run, whatever is installed already (-B: every target out of date)."""
    # As a user's shell runs it: not as a sub-make of `make test`, whose MAKEFLAGS/MAKELEVEL would add
    # "make[1]: Entering directory" lines (and its flags) to what is printed.
    env = {name: value for name, value in os.environ.items() if name not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(["make", "-n", "-B", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_make_serve_installs_the_runtime_only_and_passes_host_and_port_on():
    serve = make_dry_run("serve", "PORT=9000", "HOST=0.0.0.0")
    installs = [line for line in serve if "pip install" in line and "--upgrade pip" not in line]
    assert installs == [".venv/bin/python -m pip install --quiet -e ."], serve
    assert serve[-1].split() == [".venv/bin/vidforge", "serve", "--host", "0.0.0.0", "--port", "9000"]
    assert make_dry_run("serve")[-1].split() == [".venv/bin/vidforge", "serve"]
    # The test extras come with `make test` (and lint), after the runtime: also when `make serve` ran first.
    for target in ("test", "lint"):
        installs = [line for line in make_dry_run(target) if "pip install --quiet -e" in line]
        assert installs[-2:] == [
            ".venv/bin/python -m pip install --quiet -e .",
            ".venv/bin/python -m pip install --quiet -e '.[test]'",
        ], target
