"""Issue 32 item 3, live: a real `vidforge serve` on loopback serves its metrics on loopback only, names no tenant,
and keeps its series off every port it leaves open to the network.

Two tenants, `amsel` and `birke`, each render one clip. With the default settings (the session's shared server),
the one metrics endpoint listens on the API's address (127.0.0.1) and nowhere else, its scrape counts both renders
under `principal="all"` and holds neither name, and no other listening socket of the server's processes bound beyond
loopback (Ray's own, which Ray binds on every interface) answers a `/metrics` scrape with a vidforge series or a
tenant's name. With VIDFORGE_METRICS_PRINCIPALS=hashed, on a server of its own, the scrape tells the two apart by
their keyed hashes.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serve_app.observability._reporter import REPORT_INTERVAL_S
from tests.harness import TERMINAL, ServerProcess, Wire, free_port, poll_task, run_vidforge, upload, wait_until
from tests.media import make_clip

pytestmark = pytest.mark.ray

# Also the shared server's (tests/conftest.py).
TOKENS = {"tok-metrics-amsel-6e1f": "amsel", "tok-metrics-birke-93ca": "birke"}
NAMES = ("amsel", "birke")
DEADLINE_S = 120


def render_as_each_tenant(server: ServerProcess, tmp_path: Path) -> None:
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=1.0, width=160, height=90, audio=False)
    for token in TOKENS:
        wire = Wire(server.url, token=token, tasks=True)
        args = {"source_asset_uri": upload(server, clip, token), "output_format": "mp4", "resolution": "720p"}
        task_id = wire.tool("vidforge_render_video", args)["taskId"]
        done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
        assert done["status"] == "completed", done
        wire.close()


def metrics_url(server: ServerProcess) -> str:
    printed = re.search(r"vidforge metrics: (http://\S+/metrics)", server.log_path.read_text())
    assert printed, "vidforge serve did not print where its metrics are"
    return printed.group(1)


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """sample name -> labels -> value, of one scrape."""
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(httpx.get(url, timeout=30).text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def created_by_label(url: str) -> dict[str, float]:
    created = scrape(url).get("vidforge_renders_created_total", {})
    return {dict(labels)["principal"]: value for labels, value in created.items()}


def settled_count(url: str) -> float:
    """The `all` count of created renders once two scrapes more than a report interval apart agree: every render
    created before it is in it (each process reports its changes every REPORT_INTERVAL_S)."""
    seen: list[float] = []

    def settled() -> bool:
        seen.append(created_by_label(url).get("all", 0.0))
        return len(seen) > 1 and seen[-1] == seen[-2]

    wait_until(settled, DEADLINE_S, interval=1.5 * REPORT_INTERVAL_S, message="the created count to settle")
    return seen[-1]


def listening_sockets(pids: list[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state that one of `pids` holds (from /proc: the kernel's
    socket tables, matched to the processes' open socket inodes)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
        except OSError:
            continue  # gone meanwhile
    found = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: TCP_LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            # The kernel prints each 32-bit word of the address in host (little-endian) order.
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.add((socket.inet_ntop(family, raw), int(port, 16)))
    return found


def reachable_from_the_network(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return not ip.is_loopback and not (ip.version == 6 and ip.ipv4_mapped and ip.ipv4_mapped.is_loopback)


def what_it_answers(address: str, port: int) -> str:
    """A `/metrics` scrape of a socket, the way a neighbour on the network would try it ('' if it is no HTTP server
    that answers one)."""
    host = "127.0.0.1" if address == "0.0.0.0" else "::1" if address == "::" else address
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        return httpx.get(f"http://{netloc}/metrics", timeout=3).text
    except httpx.HTTPError:
        return ""


def test_by_default_the_endpoint_is_the_apis_address_only_and_names_no_tenant(shared_server, tmp_path):
    # The shared server runs the default metrics settings; the modules before this one have rendered on it too, and
    # none renders while this one runs (they run one after another), so its two renders are what the count gains.
    server = shared_server
    url = metrics_url(server)
    host, port = urlsplit(url).hostname, urlsplit(url).port
    assert host == "127.0.0.1", url  # the API's own address (the harness binds it to loopback)
    before = settled_count(url)
    render_as_each_tenant(server, tmp_path)
    wait_until(lambda: created_by_label(url) == {"all": before + 2}, DEADLINE_S, message="both renders, as `all`")
    exposition = httpx.get(url, timeout=30).text
    assert not [name for name in NAMES if name in exposition], "a tenant's name is on the metrics endpoint"

    sockets = listening_sockets([pid for pid, _ in server.processes()])
    assert [address for address, bound in sockets if bound == port] == ["127.0.0.1"], sockets
    open_to_the_network = [(address, bound) for address, bound in sockets if reachable_from_the_network(address)]
    for address, bound in open_to_the_network:
        answer = what_it_answers(address, bound)
        assert "vidforge_" not in answer, f"vidforge's series on {address}:{bound}, open to the network"
        assert not [name for name in NAMES if re.search(rf"\b{name}\b", answer)], f"a tenant on {address}:{bound}"


def test_with_the_breakdown_asked_for_tenants_show_as_keyed_hashes(tmp_path):
    port = free_port()
    env = {
        "VIDFORGE_POLL_INTERVAL_MS": "500",
        "VIDFORGE_METRICS_PRINCIPALS": "hashed",
        "VIDFORGE_METRICS_PORT": str(port),
    }
    with ServerProcess(tmp_path / "data", env=env, tokens=TOKENS) as server:
        render_as_each_tenant(server, tmp_path)
        url = metrics_url(server)
        assert url == f"http://127.0.0.1:{port}/metrics"
        # The labels an operator holding the review key can compute (the key vidforge generated into the state dir).
        review_key = (server.data_dir / "review.key").read_text().strip().encode()
        label_key = hmac.new(review_key, b"vidforge metrics principal labels", hashlib.sha256).digest()
        expected = {"t" + hmac.new(label_key, name.encode(), hashlib.sha256).hexdigest()[:12]: 1.0 for name in NAMES}
        wait_until(
            lambda: created_by_label(url) == expected, DEADLINE_S, message=f"one render under each of {expected}"
        )
        exposition = httpx.get(url, timeout=30).text
        assert not [name for name in NAMES if name in exposition], "a tenant's name is on the metrics endpoint"


def test_a_metrics_port_it_cannot_listen_on_refuses_the_start_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = {"VIDFORGE_DATA_DIR": str(tmp_path / "data"), "VIDFORGE_METRICS_PORT": str(port)}
        env["RAY_ADDRESS"] = ""  # a Ray of its own, whatever this shell joined
        done = run_vidforge("serve", "--port", str(free_port()), env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("vidforge:")]
    assert f"127.0.0.1:{port}" in line and "VIDFORGE_METRICS_PORT" in line, done.stderr
    assert "Ray cluster at" not in done.stdout + done.stderr  # refused before its Ray started
