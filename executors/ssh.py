"""The ssh backend: commands run on a remote host over SSH (paramiko), files move over SFTP.

Safe by default: the host key must be in the configured known_hosts file (an unknown or changed
key is refused with its fingerprint and the line that would trust it); only the configured key
is used (no agent, no searching ~/.ssh); connecting is retried with backoff, commands never are;
keepalives and a liveness check mean a dead server ends a call with SandboxGone instead of
hanging it, and the next call reconnects.
"""
from __future__ import annotations

import base64
import hashlib
import posixpath
import shlex
import socket
import threading
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .base import MAX_GET_FILE, Executor, Process
from .errors import EngineUnavailable, ExecutorError, FileTooLarge, InvalidConfig, SandboxGone
from .models import ExecRequest
from .posix import KILL_SESSION, PID_LINE_MAX


QUICK_OUTPUT = 64 * 1024  # bytes of a quick command's output kept (the rest is read and dropped)


class HostKeyRefused(ExecutorError):
    """The server's host key is unknown or does not match known_hosts."""


class SSHConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str
    port: int = Field(22, ge=1, le=65535)
    user: str
    key_file: str = Field(description="the private key to use; nothing else is tried")
    known_hosts: str = Field(description="the known_hosts file the server's key must be in")
    workdir: str | None = Field(None, description="default working directory on the host")
    connect_timeout: float = Field(10.0, gt=0)
    connect_attempts: int = Field(4, ge=1, le=10)
    keepalive: float = Field(5.0, gt=0, description="seconds between transport keepalives")
    dead_after: float = Field(20.0, gt=0, description="seconds sent data (a keepalive at least) may stay "
                              "unacknowledged before the connection counts as lost: a pulled cable or a "
                              "vanished host sends no reset, so without this a call would wait for its deadline")
    deadline: float | None = Field(3600.0, gt=0, description="longest any command may run when the call sets no "
                                   "timeout, so a hung server cannot hang a call")
    env: dict[str, str] = Field(default_factory=dict)
    forced_command: bool = Field(False, description="the server forces a command (authorized_keys command=, "
                                 "e.g. `runner host-shell`): send the argv as one shlex-joined line, which the "
                                 "forced command reads from SSH_ORIGINAL_COMMAND; no shell wrapper, cwd or env")


def fingerprint(key) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def _reject_policy():
    import paramiko

    class Reject(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client, hostname, key):
            raise HostKeyRefused(
                f"host key of {hostname} is not in the known_hosts file: {key.get_name()} {fingerprint(key)}. "
                f"If that is the server's key, trust it by adding this line to the known_hosts file: "
                f"{hostname} {key.get_name()} {key.get_base64()}")

    return Reject()


class SSHProcess(Process):
    """A command on the remote host; its wrapper shell reports its pid (the session id sshd
    gave it) on stderr first, so a timeout can kill the whole session over a second channel.
    Under a forced command there is no wrapper: a kill closes the channel, and the forced
    command (`runner host-shell`) kills what it started when its client hangs up."""

    def __init__(self, executor: "SSHExecutor", chan, reports_pid: bool = True) -> None:
        super().__init__()
        self.executor = executor
        self.chan = chan
        self.pid: int | None = None
        self._pid_known = threading.Event()
        if not reports_pid:
            self._pid_known.set()
        self._err_head = bytearray()
        self._start_readers({"stdout": lambda: chan.recv(65536), "stderr": self._stderr})

    def _stderr(self) -> bytes:
        while self.pid is None and not self._pid_known.is_set():
            data = self.chan.recv_stderr(65536)
            if not data:
                self._pid_known.set()
                return bytes(self._err_head)
            self._err_head += data
            if b"\n" in self._err_head or len(self._err_head) > PID_LINE_MAX:  # bounded: no newline-less flood
                line, nl, rest = bytes(self._err_head).partition(b"\n")
                try:
                    if not nl or len(line) > PID_LINE_MAX:
                        raise ValueError(line)
                    self.pid = int(line)
                except ValueError:
                    rest = bytes(self._err_head)
                self._pid_known.set()
                if rest:
                    return rest
        return self.chan.recv_stderr(65536)

    def write(self, data: bytes) -> None:
        self.chan.sendall(data)

    def close_stdin(self) -> None:
        try:
            self.chan.shutdown_write()
        except (OSError, EOFError):
            pass

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.chan.status_event.wait(0.2):
            if self.gone():
                raise SandboxGone(f"the SSH connection to {self.executor.config.host} was lost while a command ran")
            if deadline is not None and time.monotonic() >= deadline:
                return None
        code = self.chan.recv_exit_status()
        if code == -1:  # no exit-status message: a signal killed it, or the connection died
            time.sleep(0.05)
            if self.gone():
                raise SandboxGone(f"the SSH connection to {self.executor.config.host} was lost while a command ran")
            return 128 + 9
        return code

    def kill(self) -> None:
        self._pid_known.wait(timeout=2)
        if self.pid is not None and not self.gone():
            try:
                self.executor._run_quick(f"sh -c {shlex.quote(KILL_SESSION)} kill {self.pid}")
            except Exception:
                pass
        try:
            self.chan.close()
        except Exception:
            pass

    def gone(self) -> bool:
        t = self.chan.get_transport()
        return t is None or not t.is_active()

    def close(self) -> None:
        try:
            self.chan.close()
        except Exception:
            pass


class SSHExecutor(Executor):
    name = "ssh"

    def __init__(self, config: SSHConfig | None = None, **fields) -> None:
        if config is not None and fields:
            raise TypeError("give an SSHConfig or its fields, not both")
        self.config = config or SSHConfig(**fields)
        self._client = None
        self._lock = threading.Lock()

    # -- connection ---------------------------------------------------------------------
    def start(self) -> None:
        self._transport()

    def stop(self) -> None:
        with self._lock:
            c, self._client = self._client, None
        if c is not None:
            c.close()

    def _transport(self):
        with self._lock:
            t = self._client.get_transport() if self._client is not None else None
            if t is None or not t.is_active():
                if self._client is not None:
                    self._client.close()
                self._client = self._connect()
            return self._client.get_transport()

    def _connect(self):
        import paramiko
        from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

        cfg = self.config
        if not Path(cfg.known_hosts).is_file():
            raise HostKeyRefused(f"known_hosts file {cfg.known_hosts} does not exist: create it with the server's "
                                 f"key line (ssh-keyscan -p {cfg.port} {cfg.host} > {cfg.known_hosts}, then check it)")
        transient = (socket.timeout, ConnectionError, paramiko.ssh_exception.NoValidConnectionsError, EOFError)

        @retry(retry=retry_if_exception_type(transient), stop=stop_after_attempt(cfg.connect_attempts),
               wait=wait_exponential_jitter(multiplier=0.2, max=3.0), reraise=True)
        def attempt():
            client = paramiko.SSHClient()
            client.load_host_keys(cfg.known_hosts)
            client.set_missing_host_key_policy(_reject_policy())
            try:
                client.connect(cfg.host, port=cfg.port, username=cfg.user, key_filename=cfg.key_file,
                               allow_agent=False, look_for_keys=False, timeout=cfg.connect_timeout,
                               banner_timeout=cfg.connect_timeout, auth_timeout=cfg.connect_timeout)
            except BaseException:
                client.close()
                raise
            t = client.get_transport()
            t.set_keepalive(int(max(1, cfg.keepalive)))
            _drop_when_unacknowledged(t.sock, cfg.dead_after)
            return client

        where = f"{cfg.user}@{cfg.host}:{cfg.port}"
        try:
            return attempt()
        except HostKeyRefused:
            raise
        except paramiko.BadHostKeyException as e:
            raise HostKeyRefused(
                f"host key of {e.hostname} CHANGED: it offered {e.key.get_name()} {fingerprint(e.key)}, known_hosts "
                f"has {fingerprint(e.expected_key)}. This may be an attack; if the server really changed its key, "
                f"replace its line in {cfg.known_hosts}") from None
        except paramiko.AuthenticationException as e:
            raise EngineUnavailable(f"SSH authentication to {where} with {cfg.key_file} failed: {e}") from None
        except transient as e:
            raise EngineUnavailable(f"no SSH server answers at {where} after {cfg.connect_attempts} attempts: "
                                    f"{e or type(e).__name__}") from None
        except paramiko.SSHException as e:
            raise EngineUnavailable(f"SSH to {where} failed: {e}") from None

    def _run_quick(self, command: str, timeout: float = 10.0, keep: int = QUICK_OUTPUT) -> tuple[int, bytes]:
        """Run a short command of runner's own (a kill) to its end: at most `keep` bytes of its
        output are kept, and it ends by `timeout` whatever the host prints. The host is the
        sandbox: what its user's shell start-up prints comes first, and it may print without end."""
        deadline = time.monotonic() + timeout
        late = f"{command.split()[0]} on {self.config.host} did not end within {timeout:g}s"
        chan = self._transport().open_session(timeout=self.config.connect_timeout)
        try:
            chan.settimeout(timeout)
            chan.exec_command(command)
            chan.shutdown_write()
            out = bytearray()
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout(late)
                chan.settimeout(left)
                data = chan.recv(65536)
                if not data:
                    break
                out += data[: max(0, keep - len(out))]
            if not chan.status_event.wait(max(0.0, deadline - time.monotonic())):
                raise socket.timeout(late)
            return chan.recv_exit_status(), bytes(out)
        finally:
            chan.close()

    # -- commands -----------------------------------------------------------------------
    def _cwd(self, cwd: str | None) -> str | None:
        if not cwd or cwd.startswith("/"):
            return cwd
        return posixpath.join(self.config.workdir or ".", cwd)

    def command_line(self, req: ExecRequest) -> str:
        """The remote shell line: report $$ (sshd made this shell a session leader), enter the
        working directory, then run the argv, every word quoted; `exit $?` keeps a signal death
        visible as 128+N. A forced-command server gets the quoted argv alone."""
        if self.config.forced_command:
            if req.env or self.config.env or req.cwd or self.config.workdir:
                raise ExecutorError("this SSH server forces a command, which receives only a command line: it "
                                    "cannot be given an environment or a working directory (put them in the request "
                                    "the forced command understands, or in its authorized_keys line)")
            return shlex.join(req.argv)
        env = {**self.config.env, **req.env}
        words = ["env", "--"] + [f"{k}={v}" for k, v in env.items()] + list(req.argv) if env else list(req.argv)
        cwd = self._cwd(req.cwd) or self.config.workdir
        cd = f"cd -- {shlex.quote(cwd)} || exit 126; " if cwd else ""
        return f"echo $$ >&2; {cd}{shlex.join(words)}; exit $?"

    def exec(self, req: ExecRequest, **kw):
        if req.timeout is None and self.config.deadline:
            req = req.model_copy(update={"timeout": self.config.deadline})
        return super().exec(req, **kw)

    def spawn(self, req: ExecRequest) -> Process:
        import paramiko

        if req.user is not None and req.user.partition(":")[0] != self.config.user:
            raise InvalidConfig(f"the ssh executor runs every command as {self.config.user} on "
                                f"{self.config.host}; it cannot run one as {req.user!r}")

        try:
            line = self.command_line(req)
            chan = self._transport().open_session(timeout=self.config.connect_timeout)
            chan.exec_command(line)
        except (paramiko.SSHException, OSError, EOFError) as e:
            self.stop()
            raise SandboxGone(f"could not start a command over SSH on {self.config.host}: {e}") from None
        return SSHProcess(self, chan, reports_pid=not self.config.forced_command)

    # -- files ----------------------------------------------------------------------------
    def _sftp(self):
        return self._transport().open_sftp_client()

    def put_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        import stat as st

        sftp = self._sftp()
        try:
            parts = posixpath.dirname(path).split("/")
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d:
                    try:
                        if not st.S_ISDIR(sftp.stat(d).st_mode):
                            raise NotADirectoryError(20, "a parent of it is not a directory", path)
                    except FileNotFoundError:
                        sftp.mkdir(d)
            try:
                old = sftp.stat(path).st_mode
            except FileNotFoundError:
                old = None
            if old is not None and st.S_ISDIR(old):
                raise IsADirectoryError(21, "is a directory", path)
            if old is not None and not st.S_ISREG(old):
                raise OSError(22, "not a regular file", path)
            with sftp.open(path, "wb") as f:  # in place: an existing file keeps its mode
                f.write(data)
            if mode is not None or old is None:
                sftp.chmod(path, 0o644 if mode is None else mode)
        except OSError as e:
            raise _named(e, path) from None
        finally:
            sftp.close()

    def get_file(self, path: str, max_size: int | None = MAX_GET_FILE) -> bytes:
        import stat as st

        sftp = self._sftp()
        try:
            info = sftp.stat(path)
            if st.S_ISDIR(info.st_mode):
                raise IsADirectoryError(21, "is a directory", path)
            if not st.S_ISREG(info.st_mode):
                raise OSError(22, "not a regular file", path)
            if max_size is not None and info.st_size > max_size:
                raise FileTooLarge(path, max_size, info.st_size)
            with sftp.open(path, "rb") as f:
                data = f.read(max_size + 1) if max_size is not None else f.read()
            if max_size is not None and len(data) > max_size:
                raise FileTooLarge(path, max_size)
            return data
        except OSError as e:
            raise _named(e, path) from None
        finally:
            sftp.close()


def _drop_when_unacknowledged(sock, seconds: float) -> None:
    """Have the kernel end the connection (ETIMEDOUT) once data it sent has gone unacknowledged
    for `seconds` (Linux's TCP_USER_TIMEOUT). The transport's keepalives make sure something is
    always in flight, so a dead link is found within keepalive + dead_after seconds; the transport
    then closes, and a command on it ends with SandboxGone."""
    option = getattr(socket, "TCP_USER_TIMEOUT", None)
    if option is None or not isinstance(sock, socket.socket) or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.IPPROTO_TCP, option, int(seconds * 1000))


def _named(e: OSError, path: str) -> OSError:
    """paramiko's IOError(errno, text) as the builtin subclass, naming the path on the host."""
    if e.filename or e.errno is None:
        return e
    return OSError(e.errno, e.strerror or str(e), path)  # OSError(errno, ...) picks the subclass


EXECUTOR = SSHExecutor  # what executors.get_executor("ssh") builds
