"""LocalStack against the real Valkey binary and a real moto server process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from bidder.adapters.aws import aws_client
from bidder.stack.child import StackError, held_port
from bidder.stack.local import LocalStack
from tests.processes import descendants, gone, start_to_kill, wait_until


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        # SO_REUSEADDR as any server would: TIME_WAIT leftovers do not make a port busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _ports(stack: LocalStack) -> list[int]:
    return [urlsplit(url).port or 0 for url in (stack.valkey_url, stack.aws_endpoint)]


def test_started_servers_answer(local_stack: LocalStack) -> None:
    with redis.Redis.from_url(local_stack.valkey_url) as client:
        assert client.ping() is True
    dynamodb = aws_client("dynamodb", local_stack.aws_endpoint)
    try:
        assert "TableNames" in dynamodb.list_tables()
    finally:
        dynamodb.close()


def test_urls_are_loopback_in_redis_and_http_form(local_stack: LocalStack) -> None:
    assert local_stack.valkey_url.startswith("redis://127.0.0.1:")
    assert local_stack.aws_endpoint.startswith("http://127.0.0.1:")
    assert set(local_stack.pids) == {"valkey", "moto"}


def test_exit_stops_children_and_frees_ports() -> None:
    with LocalStack() as stack:
        pids, ports = stack.pids, _ports(stack)
    assert all(gone(pid) for pid in pids.values())
    assert all(_port_free(port) for port in ports)


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_error_inside_with_stops_children(error: type[BaseException]) -> None:
    pids: dict[str, int] = {}
    with pytest.raises(error), LocalStack() as stack:
        pids = stack.pids
        raise error("boom")
    assert len(pids) == 2
    assert all(gone(pid) for pid in pids.values())


_ORPHAN_SCRIPT = """
import json, sys
from bidder.stack.local import LocalStack
with LocalStack() as stack:
    print(json.dumps(stack.pids), flush=True)
    sys.stdin.read()  # hold the stack until killed
"""


def test_children_die_when_parent_is_killed(tmp_path: Path) -> None:
    script = [sys.executable, "-c", _ORPHAN_SCRIPT]
    parent = start_to_kill(script, tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        pids = json.loads(parent.stdout.readline())
        assert set(pids) == {"valkey", "moto"}
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert wait_until(lambda: all(gone(pid) for pid in pids.values()), timeout_s=10)
    finally:
        parent.kill()
        parent.communicate()


def test_external_urls_start_nothing_and_pass_through(local_stack: LocalStack) -> None:
    port = urlsplit(local_stack.valkey_url).port
    given_valkey = f"valkey://127.0.0.1:{port}"
    with LocalStack(valkey_url=given_valkey, aws_endpoint=local_stack.aws_endpoint) as stack:
        assert stack.pids == {}
        assert stack.valkey_url == f"redis://127.0.0.1:{port}"
        assert stack.aws_endpoint == local_stack.aws_endpoint


def test_unreachable_external_valkey_is_a_clear_error_and_stops_the_moto_it_started() -> None:
    # moto is started before Valkey is checked (its start overlaps Valkey's): a
    # Valkey that fails must not leave it running.
    before = descendants(os.getpid())
    url = f"redis://127.0.0.1:{held_port()}"
    with pytest.raises(StackError, match=f"valkey at {url} is not reachable"):
        LocalStack(valkey_url=url).start()
    assert [pid for pid in descendants(os.getpid()) - before if not gone(pid)] == []


def test_unreachable_external_aws_endpoint_is_a_clear_error(local_stack: LocalStack) -> None:
    endpoint = f"http://127.0.0.1:{held_port()}"
    stack = LocalStack(valkey_url=local_stack.valkey_url, aws_endpoint=endpoint)
    with pytest.raises(StackError, match=f"AWS endpoint {endpoint} is not reachable"):
        stack.start()
    assert stack.pids == {}


def test_urls_before_start_are_an_error() -> None:
    with pytest.raises(StackError, match="not started"):
        _ = LocalStack().valkey_url


def test_start_twice_is_an_error(local_stack: LocalStack) -> None:
    with pytest.raises(StackError, match="already started"):
        local_stack.start()
