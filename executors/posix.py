"""Shell snippets for POSIX sandboxes, shared by the backends that reach one through a shell, and
what /proc tells of a process of this machine."""


def process_start_time(pid: int) -> str | None:
    """Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


PID_LINE_MAX = 32  # stderr held back while looking for a wrapper's pid line (bounded, no flood)

# Kill every process of the session the wrapper leads, found through /proc: portable to dash
# and busybox (dash's kill takes no negative pids), and it also catches children that moved to
# another process group but stayed in the session. Each round first stops every member (a
# stopped process can neither fork nor print), then kills them; rounds repeat until no member is
# left, zombies included (a zombie still holds its slot under the pids limit until reaped), and
# the script exits 0 only then. It never forks (no $(...), no pipe, no external command): under
# a fork bomb the pids limit refuses every fork, and a command substitution that cannot fork
# yields nothing, which once made this script think the session was empty and leave the bomb
# running with the limit exhausted, so the next exec in the sandbox could not start. The process
# $1 itself is a member even where it leads no session (an image with no setsid(1) under a runtime
# that makes no exec a session leader, crun): it is killed, not left stopped.
KILL_SESSION = r"""
sid=$1
kill -STOP "$sid" 2>/dev/null
round=0
while [ "$round" -lt 1000 ]; do
  round=$((round + 1))
  pids=
  for f in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null < "$f" || continue
    set -- ${line##*) }
    p=${f#/proc/}; p=${p%/stat}
    if [ "$4" = "$sid" ] || [ "$p" = "$sid" ]; then pids="$pids $p"; fi
  done
  [ -z "$pids" ] && exit 0
  kill -STOP $pids 2>/dev/null
  kill -KILL $pids 2>/dev/null
done
exit 1
"""
