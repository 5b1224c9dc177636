"""Shell snippets for POSIX sandboxes, shared by the backends that reach one through a shell."""

# Kill every process of the session the wrapper leads, found through /proc: portable to dash
# and busybox (dash's kill takes no negative pids), and it also catches children that moved to
# another process group but stayed in the session. Each round first stops every member (a
# stopped process can neither fork nor print), then kills them; rounds repeat while forks race.
KILL_SESSION = r"""
sid=$1
members() {
  for f in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null < "$f" || continue
    set -- ${line##*) }
    if [ "$4" = "$sid" ]; then p=${f#/proc/}; echo "${p%/stat}"; fi
  done
}
kill -STOP "$sid" 2>/dev/null
for round in 1 2 3 4 5 6 7 8; do
  pids=$(members)
  [ -z "$pids" ] && exit 0
  kill -STOP $pids 2>/dev/null
  kill -KILL $pids 2>/dev/null
done
"""
