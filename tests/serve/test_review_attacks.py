"""Issue 43's review: attacks by someone who did not write the fixes, on the real server on a
loopback port with real clients. Each test here failed before its fix."""
from __future__ import annotations

import socket

import pytest

from .conftest import add_tenant

pytestmark = pytest.mark.usefixtures("no_leaks")

# made by the sandbox in its workspace: a UNIX socket, a FIFO, a directory no one may enter
SHAPES = ("python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"; mkfifo fifo; "
          "mkdir -p shut/in && echo x > shut/in/f && chmod 000 shut; ls -la")


def test_a_socket_fifo_or_shut_directory_in_the_workspace_is_a_clear_refusal_on_the_file_routes(
        start_server, data, policy_file):
    """GET of a UNIX socket the sandbox bound in its workspace answered 500 (open gave ENXIO,
    which only a link or a missing file was turned into an answer for) and reset the client's
    connection. Every shape is a 4xx naming the path, on GET and PUT, and the server goes on."""
    key = add_tenant("acme", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": SHAPES}})
        assert "sock" in r.json()["content"] and "fifo" in r.json()["content"], r.text
        for method, path in [("GET", "sock"), ("GET", "fifo"), ("GET", "sock/x"), ("GET", "fifo/x"),
                             ("PUT", "sock"), ("PUT", "fifo"), ("PUT", "sock/x"), ("PUT", "fifo/x")]:
            r = c.request(method, f"/v1/sessions/{sid}/files/{path}", content=b"x" if method == "PUT" else None)
            assert r.status_code == 422, (method, path, r.status_code, r.text)
            assert path.split("/")[0] in r.text, r.text
        for method in ("GET", "PUT"):  # root may enter it; any other server user is refused: never a 500
            r = c.request(method, f"/v1/sessions/{sid}/files/shut/in/f", content=b"y" if method == "PUT" else None)
            assert r.status_code in (200, 204, 403), (method, r.status_code, r.text)
        assert c.get(f"/v1/sessions/{sid}").status_code == 200
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
