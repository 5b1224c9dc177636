"""`runner exec -d` and what follows it: `runner ps`, `runner logs`, `runner stop`, `runner attach`.

A detached run is the hardened container of `runner exec` (the same create body, the same
labels), started and left running; runner's process ends at once. It differs in three ways, each
stated here and in the README:
- its output goes to the engine's json-file log driver, bounded: LOG_CAP (two files of
  LOG_FILE_SIZE, the oldest dropped); the log is removed with the container. Every other
  container of runner keeps the log driver `none`.
- its role label is `detached`: `runner gc` judges it by its expiry (the label; --ttl,
  default a day) and not by its owner, which has left by design;
- `--rm` removes it when its command ends (the engine's AutoRemove); without it, it stays,
  stopped, until `runner stop` (which stops and removes it) or `runner gc` past its expiry.
What needs runner's process while the command runs is refused with -d: --timeout, and -p
without --network bridge (runner relays those ports).

Only runner's own detached runs are listed, read, stopped or attached: a name or id of any other
container is refused.
"""
from __future__ import annotations

import json
import os
import re

from executors.docker import labels as L

from ..errors import RunnerError, UsageError

ROLE = "detached"
NAME = "runner.name"
LOG_FILE_SIZE = "1m"
LOG_FILES = "2"
LOG_CAP = "2 MiB"  # LOG_FILES x LOG_FILE_SIZE
DEFAULT_TTL = 24 * 3600.0
_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$")


def _engine(host: str | None):
    from executors.docker.wire import Engine, socket_path

    path = socket_path(host)
    if path is None:
        raise UsageError("detached runs: only with a local engine (unix socket), not over tcp:// or ssh://")
    return Engine(path, host)


def start(o, cfg) -> int:
    """Create and start o's container detached; print its id. cfg: exec_cmd.plain_config(o)."""
    from executors.docker import oneshot
    from executors.docker.runtimes import StartFailed, chosen, started
    from executors.docker.wire import EngineRefused

    if o.timeout is not None:
        raise UsageError("-d with --timeout: a detached run has no runner to time it; stop it with `runner stop`")
    if o.publish and o.network == "none":
        raise UsageError("-d with -p needs --network bridge: without egress runner itself relays the ports, "
                         "and a detached run has no runner")
    if o.name is not None and not _NAME.match(o.name):
        raise UsageError(f"bad --name {o.name!r}: letters, digits, '_', '.' and '-', starting with a letter or digit")
    engine = _engine(o.host)
    cfg.ttl = o.ttl or DEFAULT_TTL
    cfg.labels = {NAME: o.name or ""}
    key = engine.base_url or ""
    runtime = chosen(cfg.runtime, key, lambda: engine.json("GET", "/info"))

    def run(rt):
        body = oneshot.body_for(cfg, o.cmd, os.urandom(6).hex(), rt, tty=o.tty)
        body["Labels"][L.ROLE] = ROLE
        body.update(AttachStdin=False, AttachStdout=False, AttachStderr=False, OpenStdin=o.interactive,
                    StdinOnce=False)
        hc = body["HostConfig"]
        hc["LogConfig"] = {"Type": "json-file", "Config": {"max-size": LOG_FILE_SIZE, "max-file": LOG_FILES}}
        hc["AutoRemove"] = bool(o.rm)
        name = f"?name={o.name}" if o.name else ""
        try:
            cid = engine.json("POST", f"/containers/create{name}", body)["Id"]
        except EngineRefused as e:
            from executors.docker.engine import image_missing

            if e.status == 404 and "image" in e.message.lower():
                raise image_missing(cfg.image) from None
            if e.status == 409:
                raise RunnerError(f"--name {o.name}: a container of that name exists already") from None
            raise
        try:
            engine.json("POST", f"/containers/{cid}/start")
        except EngineRefused as e:
            oneshot.remove_container(engine, cid)
            raise StartFailed(e) from None
        return cid

    try:
        cid = started(runtime, cfg.runtime, key, run)
    except StartFailed as e:
        raise e.error from None
    print(cid)
    return 0


def _find(engine, ref: str) -> dict:
    """The container of one of runner's detached runs by name or id (a prefix of it)."""
    from executors.docker.wire import EngineRefused, quote

    if not _NAME.match(ref):  # a name or an id: nothing else goes into the engine's URL
        raise RunnerError(f"no detached run {ref!r} (`runner ps -a` lists them)")
    try:
        info = engine.json("GET", f"/containers/{quote(ref)}/json")
    except EngineRefused as e:
        if e.status == 404:
            raise RunnerError(f"no detached run {ref!r} (`runner ps -a` lists them)") from None
        raise
    labels = (info.get("Config") or {}).get("Labels") or {}
    if labels.get(L.MANAGED) != "true" or labels.get(L.ROLE) != ROLE:
        raise RunnerError(f"{ref!r} is no detached run of runner: runner leaves other containers alone")
    return info


def listing(host: str | None, all_: bool) -> list[dict]:
    from executors.docker.wire import quote

    engine = _engine(host)
    filters = quote(json.dumps({"label": [f"{L.MANAGED}=true", f"{L.ROLE}={ROLE}"]}))
    rows = engine.json("GET", f"/containers/json?all={int(all_)}&filters={filters}") or []
    return [{"id": c["Id"][:12], "name": (c.get("Names") or ["/"])[0].lstrip("/"), "image": c.get("Image", ""),
             "command": c.get("Command", ""), "status": c.get("Status", "")} for c in rows]


def logs(host: str | None, ref: str, follow: bool) -> int:
    """Write the run's output as it was logged (stdout to stdout, stderr to stderr); with follow,
    go on until the run ends."""
    from executors.docker.oneshot import _pump
    from executors.docker.wire import Frames, Raw

    from .exec_cmd import _on_output

    engine = _engine(host)
    info = _find(engine, ref)
    sock, early = engine.stream(f"/containers/{info['Id']}/logs?stdout=1&stderr=1&follow={int(follow)}")
    try:
        stream = Raw(sock, early) if (info.get("Config") or {}).get("Tty") else Frames(sock, early)
        _pump(engine, info["Id"], stream, _on_output, None)
    finally:
        sock.close()
    return 0


def stop(host: str | None, ref: str, grace: float) -> int:
    """SIGTERM, SIGKILL after grace seconds, then remove it (and its log)."""
    from executors.docker.oneshot import remove_container
    from executors.docker.wire import EngineRefused

    engine = _engine(host)
    info = _find(engine, ref)
    try:
        engine.json("POST", f"/containers/{info['Id']}/stop?t={int(grace)}", timeout=grace + 60)
    except EngineRefused as e:
        if e.status not in (304, 404):
            raise
    remove_container(engine, info["Id"])
    print(info["Name"].lstrip("/"))
    return 0


def attach(host: str | None, ref: str) -> int:
    """Its output here, stdin (when it was started with -i) there, signals passed on, until it
    ends; its exit status. With a terminal (-t) the caller's terminal is raw meanwhile."""
    from executors.docker.oneshot import _feed, _pump, _resize
    from executors.docker.wire import EngineRefused, Frames, Raw

    from .exec_cmd import _is_terminal, _on_output, _stdin, raw_terminal, terminal_size
    from .interrupts import relayed

    engine = _engine(host)
    info = _find(engine, ref)
    cid, config = info["Id"], info.get("Config") or {}
    tty, interactive = bool(config.get("Tty")), bool(config.get("OpenStdin"))
    if tty and interactive and not _is_terminal(0):
        raise UsageError("attach: the run has a terminal and stdin is not one")
    sock, early = engine.hijack(f"/containers/{cid}/attach?stream=1&stdin={int(interactive)}&stdout=1&stderr=1")
    try:
        with relayed() as relay, raw_terminal(0 if tty and interactive else None):
            if tty:
                _resize(engine, cid, terminal_size())
            stop_feeding = _feed(sock, _stdin() if interactive else None) if interactive else (lambda: None)
            relay.active = True
            try:
                _pump(engine, cid, Raw(sock, early) if tty else Frames(sock, early), _on_output, None, relay,
                      tty=terminal_size if tty else None)
            finally:
                relay.active = False
                stop_feeding()
    finally:
        sock.close()
    try:
        return int(engine.json("POST", f"/containers/{cid}/wait", timeout=None)["StatusCode"])
    except EngineRefused as e:
        if e.status == 404:  # removed as it ended (--rm): its status went with it
            return 0
        raise


def printable_rows(rows: list[dict]) -> list[str]:
    from ..untrusted.printable import printable

    lines = [f"{'ID':12}  {'NAME':24}  {'IMAGE':24}  {'STATUS':20}  COMMAND"]
    for r in rows:
        lines.append(printable(f"{r['id']:12}  {r['name'][:24]:24}  {r['image'][:24]:24}  {r['status'][:20]:20}  "
                               f"{r['command'][:60]}"))
    return lines

