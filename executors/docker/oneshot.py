"""One command in a fresh hardened container, to its end, like `docker run --rm`: `runner exec`
on the local engine, over wire.py (standard library only: no docker-py, no pydantic).

The container is hardening.create_kwargs' (the DockerExecutor's, byte for byte), created attached
with stdin open, then: attach (hijacked), start, stream until the engine closes the stream, wait,
remove. Round trips: create, attach, start, wait, remove (docker-py's path added a version probe,
a ping and a label sweep). What the DockerExecutor's per-call path promises holds here too: a
timeout kills the container (so its whole process tree; exit 124), exit 137 is told OOM or not by
the engine, an unknown user is a start failure (126), and the container is removed on every way
out, an interrupt (SIGINT, SIGTERM, SIGHUP raise in the main thread) included; one interrupted
while its create was in flight is found by its labels and removed.
"""
from __future__ import annotations

import os
import select
import signal
import socket
import threading
import time
from typing import BinaryIO, Callable, NamedTuple

from ..defaults import NOT_STARTED_EXIT, OOM_EXIT, start_failure_message
from ..errors import EngineUnavailable, SandboxGone
from . import labels as L
from .hardening import create_kwargs
from .wire import Engine, EngineRefused, Frames, Raw, create_body, quote

KILL_GRACE = 2.0  # seconds to drain output after the kill at a timeout
STOP_TIMEOUT = 10.0  # seconds a command asked to end by a signal has before it is killed (docker's)
END_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # the ones that ask it to end


class Outcome(NamedTuple):
    exit_code: int
    timed_out: bool = False
    oom_killed: bool = False


def body_for(cfg, argv: list[str], instance: str, runtime: str | None = None, tty: bool = False) -> dict:
    """The create body for cfg (a SandboxConfig or plain_config's object) running argv, attached
    with stdin open, labelled as the DockerExecutor labels a per-call container. runtime: where
    cfg names none (runtimes.chosen)."""
    labels = L.make_labels(cfg.session, cfg.ttl, role="call", extra={**cfg.labels, L.EXECUTOR: instance})
    container, host = create_kwargs(cfg, labels, runtime)
    return create_body(container, host, argv, stdin_open=True, tty=tty)


def run(engine: Engine, cfg, argv: list[str], *, stdin: BinaryIO | None,
        on_output: Callable[[str, bytes], None], timeout: float | None = None, relay=None,
        stop_timeout: float = STOP_TIMEOUT, tty: "Callable[[], tuple[int, int] | None] | None" = None,
        on_start: "Callable[[str], None] | None" = None) -> Outcome:
    """Run argv in a fresh container made from cfg; output goes to on_output(stream, data) as it
    comes; stdin is copied in until its end. The container is gone when this returns or raises.
    relay: signals to pass on to the command while it runs (runner.cli.interrupts.Relay: its `fd`
    wakes the pump, take() lists them, `active` is set while they are passed on); one that asks
    it to end (END_SIGNALS) is followed by a kill stop_timeout seconds later if it still runs.
    tty: the container gets a terminal (its output one stream, "stdout"), sized tty() (rows,
    columns; None: left as it is) at the start and at each SIGWINCH the relay hears. on_start(cid):
    called once the container runs (publish.Relay.connect).
    Under crun where the engine offers it, else (crun could not start it) the engine's default
    (runtimes.started: nothing of the command had run)."""
    from .runtimes import StartFailed, chosen, started

    key = engine.base_url or ""
    runtime = chosen(cfg.runtime, key, lambda: engine.json("GET", "/info"))
    try:
        return started(runtime, cfg.runtime, key, lambda rt: _run(engine, cfg, argv, rt, stdin, on_output, timeout,
                                                                      relay, stop_timeout, tty, on_start))
    except StartFailed as e:
        raise e.error from None


def _run(engine: Engine, cfg, argv, runtime, stdin, on_output, timeout, relay, stop_timeout, tty,
         on_start=None) -> Outcome:
    from .engine import image_missing

    instance = os.urandom(6).hex()
    body = body_for(cfg, argv, instance, runtime, tty=tty is not None)
    cid = None
    in_flight = True  # a create may have reached the engine without its answer reaching us
    try:
        try:
            cid = engine.json("POST", "/containers/create", body)["Id"]
        except EngineRefused as e:
            in_flight = False
            if e.status == 404 and "image" in e.message.lower():
                raise image_missing(cfg.image) from None
            raise
        except EngineUnavailable:
            in_flight = False
            raise
        return _attached(engine, cid, cfg, argv, stdin, on_output, timeout, time.time(), relay, stop_timeout, tty,
                         on_start)
    finally:
        _remove(engine, cid, instance if in_flight and cid is None else None)


def _attached(engine: Engine, cid: str, cfg, argv, stdin, on_output, timeout, started: float,
              relay=None, stop_timeout: float = STOP_TIMEOUT, tty=None, on_start=None) -> Outcome:
    """StartFailed: the engine would not start it (but for want of its user or group)."""
    from .runtimes import StartFailed

    try:
        sock, early = engine.hijack(f"/containers/{cid}/attach?stream=1&stdin=1&stdout=1&stderr=1")
        try:
            try:
                engine.json("POST", f"/containers/{cid}/start")
            except EngineRefused as e:
                reason = ("unknown-user" if "unable to find user" in e.message
                          else "unknown-group" if "unable to find group" in e.message else None)
                if reason is None:
                    raise StartFailed(e) from None
                on_output("stderr", start_failure_message(reason, argv[0], None, cfg.user).encode() + b"\n")
                return Outcome(NOT_STARTED_EXIT)
            if tty is not None:
                _resize(engine, cid, tty())
            if on_start is not None:
                on_start(cid)
            stop_feeding = _feed(sock, stdin)
            if relay is not None:
                relay.active = True
            try:
                stream = Frames(sock, early) if tty is None else Raw(sock, early)
                timed_out = _pump(engine, cid, stream, on_output, timeout, relay, stop_timeout, tty)
            finally:
                if relay is not None:
                    relay.active = False
                stop_feeding()
        finally:
            sock.close()
        code = _wait(engine, cid)
        if timed_out:
            return Outcome(code, timed_out=True)
        return Outcome(code, oom_killed=code == OOM_EXIT and oom_killed_since(engine, cid, started))
    except EngineUnavailable:
        raise SandboxGone("the Docker engine stopped answering (stopped or restarted?), and the sandbox with it") from None


def _feed(sock: socket.socket, stdin: BinaryIO | None) -> Callable[[], None]:
    """Copy stdin into the container in a thread, then close its stdin (at once without one).
    Returns what stops the copy (a stdin with a file descriptor is read raw, with select, so
    the thread ends when told: no read left blocked at the interpreter's shutdown)."""
    def close() -> None:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    if stdin is None:
        close()
        return lambda: None
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    if fd is not None:
        return _feed_fd(sock, fd, close)

    def copy() -> None:
        try:
            read = getattr(stdin, "read1", stdin.read)
            while chunk := read(65536):
                sock.sendall(chunk)
        except (OSError, ValueError):
            pass  # the command closed its stdin or ended: nothing more to feed
        finally:
            close()

    threading.Thread(target=copy, name="runner-stdin", daemon=True).start()
    return lambda: None


def _feed_fd(sock: socket.socket, fd: int, close: Callable[[], None]) -> Callable[[], None]:
    stop_r, stop_w = os.pipe()

    def copy() -> None:
        try:
            while True:
                ready, _, _ = select.select([fd, stop_r], [], [])
                if stop_r in ready:
                    return
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                sock.sendall(chunk)
        except (OSError, ValueError):
            pass  # the command closed its stdin or ended: nothing more to feed
        finally:
            close()
            os.close(stop_r)

    def stop() -> None:
        try:
            os.write(stop_w, b"x")
        except OSError:
            pass  # the copy ended already
        os.close(stop_w)

    threading.Thread(target=copy, name="runner-stdin", daemon=True).start()
    return stop


def _resize(engine: Engine, cid: str, size: "tuple[int, int] | None") -> None:
    """Give the container's terminal size (rows, columns)."""
    if not size:
        return
    try:
        engine.json("POST", f"/containers/{cid}/resize?h={int(size[0])}&w={int(size[1])}")
    except EngineRefused:
        pass  # it ended meanwhile


def _pump(engine: Engine, cid: str, frames: Frames, on_output, timeout: float | None, relay=None,
          stop_timeout: float = STOP_TIMEOUT, tty=None) -> bool:
    """Hand the output on until the stream ends; at the timeout kill the container and drain for
    at most KILL_GRACE more. True if the timeout struck. Signals the relay hears go to the
    command; stop_timeout seconds after one of END_SIGNALS the container is killed."""
    deadline = None if timeout is None else time.monotonic() + timeout
    stop_at = None
    grace = None  # when a command asked to end is killed
    waits = [frames.sock] + ([relay.fd] if relay is not None and relay.fd is not None else [])
    while True:
        if not frames.pending():
            now = time.monotonic()
            if stop_at is None and deadline is not None and now >= deadline:
                _kill(engine, cid)
                stop_at = now + KILL_GRACE
            if stop_at is not None and now >= stop_at:
                return True
            if grace is not None and now >= grace:
                _kill(engine, cid)
                grace = None
            until = min((t for t in (stop_at if stop_at is not None else deadline, grace) if t is not None),
                        default=None)
            ready, _, _ = select.select(waits, [], [], None if until is None else max(0.0, until - now))
            if len(waits) > 1 and waits[1] in ready:
                for signum in relay.take():
                    if signum == signal.SIGWINCH and tty is not None:
                        _resize(engine, cid, tty())
                        continue
                    _kill(engine, cid, signum)
                    if signum in END_SIGNALS and grace is None:
                        grace = time.monotonic() + stop_timeout
            if frames.sock not in ready:
                continue
        item = frames.frame()
        if item is None:
            return stop_at is not None
        if item[1]:
            on_output(*item)


def _kill(engine: Engine, cid: str, signum: int | None = None) -> None:
    """Send the container signum (its init passes it to the command), SIGKILL by default."""
    try:
        engine.json("POST", f"/containers/{cid}/kill" + (f"?signal={int(signum)}" if signum else ""))
    except EngineRefused:
        pass  # it ended meanwhile


def _wait(engine: Engine, cid: str) -> int:
    try:
        return int(engine.json("POST", f"/containers/{cid}/wait", timeout=None)["StatusCode"])
    except EngineRefused as e:
        if e.status == 404:  # removed under us: it was killed
            return OOM_EXIT
        raise


def oom_flag(engine: Engine, cid: str) -> "bool | None":
    """The engine's OOMKilled of the container; None if it cannot tell (the container is gone)."""
    try:
        return bool((engine.json("GET", f"/containers/{cid}/json").get("State") or {}).get("OOMKilled"))
    except Exception:
        return None


def oom_killed_since(engine: Engine, cid: str, since: float) -> bool:
    """Did the memory limit kill something in the container? The engine's OOMKilled flag, else an
    oom event since the start (the executor's ContainerProcess.oom_killed asks the same; its
    EngineContainerProcess asks this). Each asked on its own: a container already removed has no
    flag to tell, and its events still do."""
    if oom_flag(engine, cid):
        return True
    try:
        filters = quote('{"container": ["%s"], "event": ["oom"]}' % cid)
        status, data = engine.request("GET", f"/events?since={int(since) - 1}&until={int(time.time()) + 1}"
                                              f"&filters={filters}")
        return status == 200 and bool(data.strip())
    except Exception:
        return False


def _remove(engine: Engine, cid: str | None, instance: str | None) -> None:
    """Remove the container; with no id, every container of this run (its executor label) that a
    create caught by an interrupt may have made. What the engine will not remove now (it is down)
    is left for `runner gc`, which finds it by its labels. An interrupt that strikes during the
    removal (the first signal; interrupts.handled ignores the later ones) removes it again first."""
    try:
        _remove_now(engine, cid, instance)
    except KeyboardInterrupt:
        _remove_now(engine, cid, instance)
        raise


def _remove_now(engine: Engine, cid: str | None, instance: str | None) -> None:
    if cid:
        remove_container(engine, cid)
    elif instance:
        remove_instance(engine, instance)


def remove_container(engine: Engine, cid: str) -> None:
    """Remove the container, whatever it runs; one the engine will not remove now (it is down) is
    left to the label sweeps (the executor's stop(), `runner gc`)."""
    try:
        engine.json("DELETE", f"/containers/{cid}?force=1")
    except (EngineRefused, EngineUnavailable, OSError):
        pass


def remove_instance(engine: Engine, instance: str) -> bool:
    """Remove every container of one executor instance of this process (its labels); False if
    the engine would not (it is down: they are left for `runner gc`, or owed by the executor)."""
    try:
        filters = quote('{"label": ["%s=%s", "%s=%d"]}' % (L.EXECUTOR, instance, L.OWNER_PID, os.getpid()))
        for c in engine.json("GET", f"/containers/json?all=1&filters={filters}") or []:
            try:
                engine.json("DELETE", f"/containers/{c['Id']}?force=1")
            except EngineRefused as e:
                if e.status != 404 and "already in progress" not in e.message:
                    raise
    except (EngineRefused, EngineUnavailable, OSError):
        return False
    return True
