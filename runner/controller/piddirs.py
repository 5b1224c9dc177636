"""Directories named for the process that made them (`<prefix><pid>.<start>-<random>`, start
in clock ticks since boot, as the containers' owner labels), and removing those whose process is
gone: what a controller killed mid-way (SIGKILL, a lost login session) left behind, found by
`runner gc`. The start time tells a dead controller's directory from a live process that was
given its pid since; a name without one (made before it was in the name) is kept while its pid
is any live process."""
from __future__ import annotations

import os
import stat
import tempfile

from executors.posix import process_start_time

from ..untrusted.wspath import remove_tree


def make(prefix: str, base: str | None = None) -> str:
    """A new private directory `<base>/<prefix><this pid>.<its start>-<random>` (mode 0700;
    without `.<its start>` where /proc cannot tell it)."""
    pid = os.getpid()
    start = process_start_time(pid)
    return tempfile.mkdtemp(prefix=f"{prefix}{pid}{'.' + start if start else ''}-", dir=base)


def sweep(base: str, prefix: str, dry_run: bool = False) -> list[tuple[str, str]]:
    """Remove (unless dry_run) the directories under base named `<prefix><pid>[.<start>]-...`
    whose process is gone (no live process by that pid, or one started at another time) and
    which belong to this user: (path, why) of each. A symlink, a file, or a
    directory of another user by that name is left alone (anyone may create names in /tmp)."""
    out = []
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names:
        if not name.startswith(prefix):
            continue
        pid, dot, start = name[len(prefix):].split("-", 1)[0].partition(".")
        if not pid.isdigit() or (dot and not start.isdigit()):
            continue
        live = process_start_time(int(pid))
        if live is not None and (not dot or live == start):
            continue
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        if not dry_run:
            remove_tree(path)  # never follows a link inside it, any depth; what is left stays for the next sweep
        out.append((path, f"its controller (pid {pid}) is gone"))
    return out


def sweep_local(dry_run: bool = False) -> list[tuple[str, str, str]]:
    """What controllers killed mid-way left on this machine, which no engine is needed to find:
    agent-socket directories not yet taken, result stores."""
    from . import channel, output

    return ([(path, "channel", why) for path, why in channel.sweep(dry_run)]
            + [(path, "results", why) for path, why in output.sweep(dry_run)])
