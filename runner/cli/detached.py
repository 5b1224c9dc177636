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

import re

from ..errors import RunnerError, UsageError

ROLE = "detached"
NAME = "runner.name"
LOG_FILE_SIZE = "1m"
LOG_FILES = "2"
LOG_CAP = "2 MiB"  # LOG_FILES x LOG_FILE_SIZE
DEFAULT_TTL = 24 * 3600.0
_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$")


def _engine(host: str | None):
    from ..backends.docker_engine import local_engine

    engine = local_engine(host)
    if engine is None:
        raise UsageError("detached runs: only with a local engine (unix socket), not over tcp:// or ssh://")
    return engine


def start(o, cfg) -> int:
    """Create and start o's container detached; print its id. cfg: exec_cmd.plain_config(o)."""
    from ..backends.docker_engine import start_detached

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
    print(start_detached(engine, cfg, o.cmd, role=ROLE, tty=o.tty, interactive=o.interactive, remove=o.rm,
                         name=o.name, log={"max-size": LOG_FILE_SIZE, "max-file": LOG_FILES}))
    return 0


def _find(engine, ref: str) -> dict:
    """The container of one of runner's detached runs by name or id (a prefix of it)."""
    from ..backends.docker_engine import inspect_run

    if not _NAME.match(ref):  # a name or an id: nothing else goes into the engine's URL
        raise RunnerError(f"no detached run {ref!r} (`runner ps -a` lists them)")
    info = inspect_run(engine, ref, ROLE)
    if info is None:
        raise RunnerError(f"no detached run {ref!r} (`runner ps -a` lists them)")
    return info


def listing(host: str | None, all_: bool) -> list[dict]:
    from ..backends.docker_engine import list_runs

    rows = list_runs(_engine(host), ROLE, all_)
    return [{"id": c["Id"][:12], "name": (c.get("Names") or ["/"])[0].lstrip("/"), "image": c.get("Image", ""),
             "command": c.get("Command", ""), "status": c.get("Status", "")} for c in rows]


def logs(host: str | None, ref: str, follow: bool) -> int:
    """Write the run's output as it was logged (stdout to stdout, stderr to stderr); with follow,
    go on until the run ends."""
    from ..backends.docker_engine import copy_logs
    from .exec_cmd import _on_output

    engine = _engine(host)
    copy_logs(engine, _find(engine, ref), follow, _on_output)
    return 0


def stop(host: str | None, ref: str, grace: float) -> int:
    """SIGTERM, SIGKILL after grace seconds, then remove it (and its log)."""
    from ..backends.docker_engine import stop_and_remove

    engine = _engine(host)
    info = _find(engine, ref)
    stop_and_remove(engine, info["Id"], grace)
    print(info["Name"].lstrip("/"))
    return 0


def attach(host: str | None, ref: str) -> int:
    """Its output here, stdin (when it was started with -i) there, signals passed on, until it
    ends; its exit status. With a terminal (-t) the caller's terminal is raw meanwhile."""
    from ..backends.docker_engine import attach_run
    from .exec_cmd import _is_terminal, _on_output, _stdin, raw_terminal, terminal_size
    from .interrupts import relayed

    engine = _engine(host)
    info = _find(engine, ref)
    config = info.get("Config") or {}
    tty, interactive = bool(config.get("Tty")), bool(config.get("OpenStdin"))
    if tty and interactive and not _is_terminal(0):
        raise UsageError("attach: the run has a terminal and stdin is not one")
    with relayed() as relay, raw_terminal(0 if tty and interactive else None):
        return attach_run(engine, info, stdin=_stdin() if interactive else None, on_output=_on_output, relay=relay,
                          size=terminal_size)


def printable_rows(rows: list[dict]) -> list[str]:
    from ..untrusted.printable import printable

    lines = [f"{'ID':12}  {'NAME':24}  {'IMAGE':24}  {'STATUS':20}  COMMAND"]
    for r in rows:
        lines.append(printable(f"{r['id']:12}  {r['name'][:24]:24}  {r['image'][:24]:24}  {r['status'][:20]:20}  "
                               f"{r['command'][:60]}"))
    return lines

