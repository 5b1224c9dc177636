"""Out-of-memory kills in the sandbox's own memory cgroup, as the kernel counts them.

The kernel counts a kill before it sends the SIGKILL, so once a command is seen ended the count
already holds its kill: no engine event to wait for (those come later, and asynchronously)."""
from __future__ import annotations

COUNTERS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")  # cgroup v2, v1


def kills() -> int | None:
    """How many processes the memory limit has killed in this cgroup, or None if it cannot be read."""
    for path in COUNTERS:
        try:
            with open(path, encoding="ascii") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def killed_since(before: int | None) -> bool:
    after = kills()
    return before is not None and after is not None and after > before
