"""A small Docker Engine API client over the local unix socket, standard library only.

`runner exec` runs one container and exits; through docker-py it paid for importing requests,
urllib3 and pydantic, a version probe and a ping before its first real request (about half its
time). This client speaks just what a container run to its end needs (oneshot.py, and a sandbox's
container: the DockerExecutor's per-call path, process.EngineContainerProcess): JSON requests on a
fresh connection each (`Connection: close`, so a body ends where the engine says or where it hangs
up), and the hijacked attach stream with its multiplexed frames (also read by process.py for the
SDK path). tcp:// and ssh:// engines stay with docker-py (TLS, paramiko): socket_path() says which.
"""
from __future__ import annotations

import json
import os
import socket
import struct

from ..errors import ExecutorError

STREAMS = {1: "stdout", 2: "stderr"}
DEFAULT_SOCKET = "/var/run/docker.sock"
MAX_HEAD = 64 * 1024  # bytes of status line and headers accepted from the engine
MAX_BODY = 64 * 1024**2  # bytes of one JSON answer accepted from the engine


class EngineRefused(ExecutorError):
    """The engine answered a request with an error status (what docker-py calls an APIError)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"the Docker engine refused: {message}")
        self.status = status
        self.message = message


def socket_path(base_url: str | None = None) -> str | None:
    """The unix socket of the engine at base_url (or $DOCKER_HOST, or the default one); None when
    that engine is reached another way (tcp://, ssh://), which only docker-py speaks."""
    url = base_url or os.environ.get("DOCKER_HOST") or ""
    if not url:
        return DEFAULT_SOCKET
    if url.startswith("unix://"):
        return url[len("unix://"):] or DEFAULT_SOCKET
    return None


def quote(text: str) -> str:
    """Percent-encode a path segment (an image name keeps its / and :, as docker-py sends it)."""
    safe = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/:@"
    return "".join(chr(b) if b in safe else f"%{b:02X}" for b in text.encode())


class Engine:
    """The engine at one unix socket. Errors: EngineUnavailable (nothing answers: engine.unavailable's
    one line), EngineRefused (an error status)."""

    def __init__(self, path: str, base_url: str | None = None) -> None:
        self.path = path
        self.base_url = base_url

    def _connect(self, timeout: float | None) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(self.path)
        except OSError as e:
            sock.close()
            from .engine import unavailable

            raise unavailable(self.base_url, e) from None
        return sock

    def _send(self, method: str, path: str, body, headers: str, timeout: float | None) -> socket.socket:
        data = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: docker\r\n{headers}"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
        sock = self._connect(timeout)
        try:
            sock.sendall(head.encode() + data)
        except BaseException:
            sock.close()
            raise
        return sock

    def request(self, method: str, path: str, body=None, timeout: float | None = 120) -> tuple[int, bytes]:
        """(status, body) of one request; the body read to its end."""
        sock = self._send(method, path, body, "Connection: close\r\n", timeout)
        try:
            reader = _Reader(sock)
            status, headers = reader.head()
            return status, reader.body(status, headers)
        finally:
            sock.close()

    def json(self, method: str, path: str, body=None, timeout: float | None = 120):
        """The decoded JSON answer (None when there is none); EngineRefused for an error status."""
        status, data = self.request(method, path, body, timeout)
        if status >= 400:
            raise _refused(status, data)
        return json.loads(data) if data.strip() else None

    def stream(self, path: str) -> tuple[socket.socket, bytes]:
        """GET path as a stream read to the engine's hang-up (HTTP/1.0: never chunked), e.g. a
        container's logs: the socket, and what was read past the headers."""
        sock = self._connect(None)
        try:
            sock.sendall(f"GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
            reader = _Reader(sock)
            status, headers = reader.head()
            if status >= 400:
                raise _refused(status, reader.body(status, headers))
        except BaseException:
            sock.close()
            raise
        return sock, bytes(reader.buf)

    def hijack(self, path: str) -> tuple[socket.socket, bytes]:
        """POST path as an upgraded (hijacked) connection: the raw socket, and what was read past
        the engine's headers (the first bytes of the stream)."""
        sock = self._send("POST", path, None, "Connection: Upgrade\r\nUpgrade: tcp\r\n", None)
        try:
            reader = _Reader(sock)
            status, headers = reader.head()
            if status not in (101, 200):
                raise _refused(status, reader.body(status, headers))
        except BaseException:
            sock.close()
            raise
        return sock, bytes(reader.buf)


def _refused(status: int, data: bytes) -> "EngineRefused":
    """The engine's error answer as EngineRefused: its JSON `message`, else its text."""
    try:
        message = json.loads(data).get("message") or ""
    except (ValueError, AttributeError):
        message = data.decode(errors="replace").strip()
    return EngineRefused(status, message or f"HTTP {status}")


class _Reader:
    """Reads one HTTP/1.1 response from a socket: the head, then a body by Content-Length, chunks,
    or up to the engine's hang-up."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def _more(self) -> bool:
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buf += data
        return True

    def head(self) -> tuple[int, dict[str, str]]:
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            if len(self.buf) > MAX_HEAD or not self._more():
                raise ConnectionError("the Docker engine hung up or sent no HTTP answer")
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        del self.buf[: end + 4]
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ConnectionError(f"the Docker engine sent no HTTP answer: {lines[0][:80]!r}")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(parts[1]), headers

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._more():
                raise ConnectionError("the Docker engine hung up in the middle of an answer")
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def _line(self) -> bytes:
        while (end := self.buf.find(b"\r\n")) < 0:
            if len(self.buf) > MAX_HEAD or not self._more():
                raise ConnectionError("the Docker engine hung up in the middle of an answer")
        line = bytes(self.buf[:end])
        del self.buf[: end + 2]
        return line

    def body(self, status: int, headers: dict[str, str]) -> bytes:
        if status in (101, 204, 304) or 100 <= status < 200:
            return b""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            out = bytearray()
            while True:
                size = int(self._line().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self._line():  # trailers, up to the empty line
                        pass
                    return bytes(out)
                if len(out) + size > MAX_BODY:
                    raise ConnectionError("the Docker engine's answer is too big")
                out += self._exactly(size)
                self._exactly(2)  # CRLF after each chunk
        if "content-length" in headers:
            n = int(headers["content-length"])
            if n > MAX_BODY:
                raise ConnectionError("the Docker engine's answer is too big")
            return self._exactly(n)
        while self._more():  # no length: the body ends where the engine hangs up
            if len(self.buf) > MAX_BODY:
                raise ConnectionError("the Docker engine's answer is too big")
        data = bytes(self.buf)
        self.buf.clear()
        return data


class Frames:
    """Docker's multiplexed stream, read from a socket: frames of an 8-byte header (stream id,
    3 zero bytes, big-endian length) and a payload. `buf` holds bytes already read past the
    HTTP head."""

    def __init__(self, sock: socket.socket, buf: bytes = b"") -> None:
        self.sock = sock
        self.buf = bytearray(buf)

    def _fill(self, n: int) -> bool:
        while len(self.buf) < n:
            try:
                data = self.sock.recv(max(65536, n - len(self.buf)))
            except OSError:
                return False
            if not data:
                return False
            self.buf += data
        return True

    def frame(self) -> tuple[str, bytes] | None:
        """The next (stream, payload): "stdout" or "stderr" (an unknown id counts as stdout);
        None at the end of the stream, or when it ends within a frame."""
        if not self._fill(8):
            return None
        kind, size = struct.unpack(">BxxxL", self.buf[:8])
        if not self._fill(8 + size):
            return None
        payload = bytes(self.buf[8 : 8 + size])
        del self.buf[: 8 + size]
        return STREAMS.get(kind, "stdout"), payload

    def pending(self) -> bool:
        """A whole frame is already buffered (a reader need not wait on the socket for it)."""
        return len(self.buf) >= 8 and len(self.buf) >= 8 + struct.unpack(">L", self.buf[4:8])[0]


class Raw(Frames):
    """The attach stream of a container with a terminal: not multiplexed, one stream of bytes
    (the terminal's), handed on as "stdout" as it comes."""

    def frame(self) -> tuple[str, bytes] | None:
        if self.buf:
            data = bytes(self.buf)
            self.buf.clear()
            return "stdout", data
        try:
            data = self.sock.recv(65536)
        except OSError:
            return None
        return ("stdout", data) if data else None

    def pending(self) -> bool:
        return bool(self.buf)


# docker-py's host_config arguments (what hardening.create_kwargs gives) -> the Engine API's
# HostConfig keys, each set as docker.types.HostConfig sets it: "set" when not None, "truthy" when
# truthy. An argument missing here is refused, never dropped: a new hardening setting must be
# added here too (tests/integration/docker/test_wire.py compares with docker-py for every loosening).
HOST_KEYS = {
    "network_mode": ("NetworkMode", "network"),
    "cap_drop": ("CapDrop", "truthy"),
    "cap_add": ("CapAdd", "truthy"),
    "security_opt": ("SecurityOpt", "set"),
    "read_only": ("ReadonlyRootfs", "set"),
    "tmpfs": ("Tmpfs", "truthy"),
    "pids_limit": ("PidsLimit", "truthy"),
    "mem_limit": ("Memory", "set"),
    "memswap_limit": ("MemorySwap", "set"),
    "nano_cpus": ("NanoCpus", "truthy"),
    "init": ("Init", "set"),
    "mounts": ("Mounts", "set"),
    "ipc_mode": ("IpcMode", "truthy"),
    "log_config": ("LogConfig", "log"),
    "runtime": ("Runtime", "truthy"),
    "dns": ("Dns", "set"),
    "readonly_paths": ("ReadonlyPaths", "set"),
    "oom_score_adj": ("OomScoreAdj", "truthy"),
    "shm_size": ("ShmSize", "truthy"),
    "device_requests": ("DeviceRequests", "truthy"),
    "port_bindings": ("PortBindings", "truthy"),  # as the engine takes them (hardening.publish_bindings)
}
CONTAINER_KEYS = {"image": "Image", "user": "User", "environment": "Env", "labels": "Labels",
                  "working_dir": "WorkingDir", "network_disabled": "NetworkDisabled", "entrypoint": "Entrypoint",
                  "ports": "ExposedPorts"}


def create_body(container: dict, host: dict, command: list[str], stdin_open: bool = False, tty: bool = False) -> dict:
    """The body of POST /containers/create for hardening.create_kwargs' (container, host)
    arguments, as docker-py's create_container(**container, command=, stdin_open=,
    host_config=create_host_config(**host), use_config_proxy=False) sends it (attached, not
    detached; no tty unless asked; no proxies from the user's docker configuration)."""
    hc = {}
    for arg, value in host.items():
        if arg not in HOST_KEYS:
            raise ValueError(f"create_body: host_config argument {arg!r} has no Engine API key here (wire.HOST_KEYS)")
        key, rule = HOST_KEYS[arg]
        if rule == "network":
            hc[key] = value or "default"
        elif rule == "log":
            if value is not None:
                hc[key] = {"Type": value.get("type", value.get("Type")), "Config": value.get("config", value.get("Config")) or {}}
        elif (rule == "set" and value is not None) or (rule == "truthy" and value):
            hc[key] = value
    body = {"Tty": tty, "OpenStdin": stdin_open, "StdinOnce": stdin_open, "AttachStdin": stdin_open,
            "AttachStdout": True, "AttachStderr": True, "Cmd": list(command) or None, "HostConfig": hc}
    for arg, value in container.items():
        if arg not in CONTAINER_KEYS:
            raise ValueError(f"create_body: container argument {arg!r} has no Engine API key here (wire.CONTAINER_KEYS)")
        if arg == "environment" and isinstance(value, dict):
            value = [k if v is None else f"{k}={v}" for k, v in value.items()]
        elif arg == "user" and value is not None:
            value = str(value)
        if value is not None:
            body[CONTAINER_KEYS[arg]] = value
    return body
