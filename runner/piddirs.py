"""Directories named for the process that made them (`<prefix><pid>-<random>`), and removing
those whose process is gone: what a controller killed mid-way (SIGKILL, a lost login session)
left behind, found by `runner gc`."""
from __future__ import annotations

import os
import shutil
import stat
import tempfile


def make(prefix: str, base: str | None = None) -> str:
    """A new private directory `<base>/<prefix><this pid>-<random>` (mode 0700)."""
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base)


def sweep(base: str, prefix: str, dry_run: bool = False) -> list[tuple[str, str]]:
    """Remove (unless dry_run) the directories under base named `<prefix><pid>-...` whose pid is
    no live process and which belong to this user: (path, why) of each. A symlink, a file, or a
    directory of another user by that name is left alone (anyone may create names in /tmp)."""
    out = []
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names:
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix):].split("-", 1)[0]
        path = os.path.join(base, name)
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        if not dry_run:
            shutil.rmtree(path, ignore_errors=True)  # never follows a link inside it
        out.append((path, f"its controller (pid {pid}) is gone"))
    return out
