"""The one line for a port `vidforge serve` cannot listen on (issue 33 item 3), from the check before Ray starts and
from a replica's failed bind as Serve reports it; in-process, on real sockets."""

from __future__ import annotations

import socket

import pytest

from serve_app.launch._port_check import PortUnavailable, check_port


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


def test_a_port_in_use_is_named_with_the_way_to_pick_another():
    with listening() as taken:
        port = taken.getsockname()[1]
        with pytest.raises(PortUnavailable) as refused:
            check_port("127.0.0.1", port)
    assert str(refused.value) == (
        f"127.0.0.1:{port} is already in use by another program; pick another port with `vidforge serve --port N` "
        "(or `make serve PORT=N`)"
    )


def test_a_port_shared_with_so_reuseport_counts_as_taken():
    """What another `vidforge serve`'s replicas hold: they would let a second server's replicas share it."""
    with socket.socket() as replica:
        replica.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        replica.bind(("127.0.0.1", 0))
        replica.listen(1)
        with pytest.raises(PortUnavailable):
            check_port("127.0.0.1", replica.getsockname()[1])


def test_an_address_of_no_interface_names_the_host_flag():
    with pytest.raises(PortUnavailable) as refused:
        check_port("192.0.2.123", 8000)  # TEST-NET-1: on no interface of a test machine
    assert "192.0.2.123:8000" in str(refused.value) and "make serve HOST=ADDRESS" in str(refused.value)


def test_a_free_port_passes_and_stays_free():
    with listening() as probe:
        port = probe.getsockname()[1]
    check_port("127.0.0.1", port)
    check_port("127.0.0.1", port)  # the check's own listener is gone with it


def test_the_replicas_refusal_is_found_in_the_deployments_status_message():
    """Serve reports a replica's failed constructor as its traceback, whose last line is the exception."""
    with listening() as taken:
        port = taken.getsockname()[1]
        with pytest.raises(PortUnavailable) as raised:
            check_port("127.0.0.1", port)
    message = (
        "Traceback (most recent call last):\n"
        '  File "/srv/serve_app/launch/deployment.py", line 58, in __init__\n'
        "    raise PortUnavailable(config.host, config.port, err) from None\n"
        f"serve_app.launch._port_check.PortUnavailable: {raised.value}"
    )
    found = PortUnavailable.from_status("127.0.0.1", port, message)
    assert found is not None and str(found) == str(raised.value)
    assert PortUnavailable.from_status("127.0.0.1", port, "RuntimeError: the lifespan failed") is None
