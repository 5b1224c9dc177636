"""The process inside an E2B sandbox's container that does what envd does there: it starts
commands (pipes or a pty), passes their input, signals and window sizes, streams their output,
and does the file operations, as the sandbox's user. Standard library only: it is sent to the
container's python3 as the source of `python3 -c` by runner/servers/e2b/sandbox.py, which talks
to it over the docker exec's stdin and stdout, one JSON object a line.

Requests: {"id": N, "op": OP, ...}; answers {"id": N, "ok": true, ...} or {"id": N, "error": KIND,
"message": TEXT}. Events of running processes: {"ev": "data", "pid", "stream", "b64"} and
{"ev": "end", "pid", "code", "signal"}. The controller trusts none of it beyond its own
sandbox: it is the sandbox's word about the sandbox, bounded line by line where it is read.
"""
SOURCE = r'''
import base64, errno, fcntl, json, os, pty, select, signal, stat as S, struct, subprocess, sys, termios, threading
out_lock = threading.Lock()
procs = {}
OUT = sys.stdout.buffer
def send(obj):
    line = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
    with out_lock:
        OUT.write(line); OUT.flush()
def entry(path, st=None):
    st = st or os.lstat(path)
    kind = "dir" if S.S_ISDIR(st.st_mode) else ("file" if S.S_ISREG(st.st_mode) else ("symlink" if S.S_ISLNK(st.st_mode) else "other"))
    target = None
    if S.S_ISLNK(st.st_mode):
        try:
            target = os.path.realpath(path)
            tst = os.stat(path)
            kind = "dir" if S.S_ISDIR(tst.st_mode) else "file"
        except OSError:
            kind = "file"
    try:
        import pwd, grp
        owner = pwd.getpwuid(st.st_uid).pw_name
    except Exception:
        owner = str(st.st_uid)
    try:
        import grp
        group = grp.getgrgid(st.st_gid).gr_name
    except Exception:
        group = str(st.st_gid)
    meta = {}
    try:
        for name in os.listxattr(path, follow_symlinks=False):
            if name.startswith("user.e2b."):
                meta[name[9:]] = os.getxattr(path, name, follow_symlinks=False).decode("utf-8", "replace")
    except OSError:
        pass
    return {"name": os.path.basename(path.rstrip("/")) or "/", "path": path, "type": kind, "size": st.st_size, "metadata": meta,
            "mode": S.S_IMODE(st.st_mode), "permissions": S.filemode(st.st_mode), "owner": owner, "group": group,
            "mtime": st.st_mtime, "symlink_target": target}
class Proc:
    def __init__(self, r):
        argv = [r["cmd"]] + list(r.get("args") or [])
        env = dict(os.environ); env.update(r.get("env") or {})
        cwd = r.get("cwd") or os.environ.get("HOME") or "/"
        self.tag = r.get("tag"); self.cmd = r["cmd"]; self.args = list(r.get("args") or []); self.envs = r.get("env") or {}; self.cwd = cwd
        self.master = None
        size = r.get("pty")
        if size is not None:
            m, s = pty.openpty()
            fcntl.ioctl(s, termios.TIOCSWINSZ, struct.pack("HHHH", size.get("rows") or 24, size.get("cols") or 80, 0, 0))
            env.setdefault("TERM", "xterm-256color")
            self.p = subprocess.Popen(argv, stdin=s, stdout=s, stderr=s, env=env, cwd=cwd, start_new_session=True,
                                      close_fds=True)
            os.close(s)
            self.master = m
            readers = {"pty": m}
        else:
            self.p = subprocess.Popen(argv, stdin=subprocess.PIPE if r.get("stdin") else subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                                      start_new_session=True, close_fds=True)
            readers = {"stdout": self.p.stdout.fileno(), "stderr": self.p.stderr.fileno()}
        self.pid = self.p.pid
        self.left = len(readers)
        self.lock = threading.Lock()
        self.readers = readers
    def go(self):
        for name, fd in self.readers.items():
            threading.Thread(target=self.pump, args=(name, fd), daemon=True).start()
    def pump(self, name, fd):
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            if not data:
                break
            send({"ev": "data", "pid": self.pid, "stream": name, "b64": base64.b64encode(data).decode()})
        with self.lock:
            self.left -= 1
            last = self.left == 0
        if last:
            rc = self.p.wait()
            procs.pop(self.pid, None)
            if self.master is not None:
                try: os.close(self.master)
                except OSError: pass
            send({"ev": "end", "pid": self.pid, "code": rc if rc >= 0 else 128 - rc, "signal": -rc if rc < 0 else 0})
    def write(self, data):
        if self.master is not None:
            os.write(self.master, data)
        elif self.p.stdin is not None:
            self.p.stdin.write(data); self.p.stdin.flush()
        else:
            raise ValueError("this process was started without stdin")
def op_start(r):
    p = Proc(r); procs[p.pid] = p
    return {"pid": p.pid}
def find(r):
    p = procs.get(r.get("pid"))
    if p is None:
        raise LookupError("process with pid %s not found" % r.get("pid"))
    return p
def op_input(r):
    find(r).write(base64.b64decode(r["b64"])); return {}
def op_close_stdin(r):
    p = find(r)
    if p.p.stdin is not None: p.p.stdin.close()
    return {}
def op_signal(r):
    p = find(r)
    try: os.killpg(p.pid, r["sig"])
    except ProcessLookupError: pass
    return {}
def op_resize(r):
    p = find(r)
    if p.master is None: raise ValueError("the process has no pty")
    fcntl.ioctl(p.master, termios.TIOCSWINSZ, struct.pack("HHHH", r["rows"], r["cols"], 0, 0))
    try: os.killpg(p.pid, signal.SIGWINCH)
    except OSError: pass
    return {}
def op_list(r):
    return {"processes": [{"pid": p.pid, "tag": p.tag, "cmd": p.cmd, "args": p.args, "envs": p.envs, "cwd": p.cwd} for p in list(procs.values())]}
def op_stat(r):
    return {"entry": entry(r["path"], os.stat(r["path"]) if r.get("follow") else None)}
def op_list_dir(r):
    top = r["path"]; depth = r.get("depth") or 1
    st = os.stat(top)
    if not S.S_ISDIR(st.st_mode): raise NotADirectoryError(errno.ENOTDIR, "path is not a directory", top)
    res = []
    def walk(d, level):
        for name in sorted(os.listdir(d)):
            p = os.path.join(d, name)
            try: e = entry(p)
            except FileNotFoundError: continue
            res.append(e)
            if e["type"] == "dir" and not os.path.islink(p) and level < depth:
                walk(p, level + 1)
    walk(top, 1)
    return {"entries": res}
def op_mkdir(r):
    p = r["path"]
    if os.path.isdir(p): return {"created": False, "entry": entry(p)}
    os.makedirs(p); return {"created": True, "entry": entry(p)}
def op_remove(r):
    p = r["path"]
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return {}
    if S.S_ISDIR(st.st_mode):
        import shutil; shutil.rmtree(p)
    else:
        os.unlink(p)
    return {}
def op_rename(r):
    os.rename(r["src"], r["dst"]); return {"entry": entry(r["dst"])}
def op_read(r):
    p = r["path"]
    fd = os.open(p, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        if S.S_ISDIR(st.st_mode): raise IsADirectoryError(errno.EISDIR, "path is a directory", p)
        if st.st_size > r["max"]: raise OverflowError("file is larger than %d bytes" % r["max"])
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b: break
            chunks.append(b)
    finally:
        os.close(fd)
    return {"b64": base64.b64encode(b"".join(chunks)).decode()}
def op_write(r):
    p = r["path"]
    d = os.path.dirname(p)
    if d: os.makedirs(d, exist_ok=True)
    with open(p, "wb") as f:
        f.write(base64.b64decode(r["b64"]))
        for name in os.listxattr(f.fileno()):  # the file's metadata is what this write says, none when it says none
            if name.startswith("user.e2b."):
                os.removexattr(f.fileno(), name)
        for k, v in (r.get("metadata") or {}).items():
            os.setxattr(f.fileno(), "user.e2b." + k.lower(), v.encode())
        os.fchown(f.fileno(), os.getuid(), os.getgid())  # the owner set, as envd's writes do (watchers see a chmod)
    return {"entry": entry(p)}
def op_snapshot(r):
    # what watch compares: the names and (type, size, mtime) of a directory's entries, to a depth
    top = r["path"]; depth = 64 if r.get("recursive") else 1
    res = {}
    def walk(d, level):
        try: names = os.listdir(d)
        except OSError: return
        for name in names:
            p = os.path.join(d, name)
            try: st = os.lstat(p)
            except OSError: continue
            res[p] = [S.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, S.S_IMODE(st.st_mode)]
            if S.S_ISDIR(st.st_mode) and level < depth: walk(p, level + 1)
    if not S.S_ISDIR(os.stat(top).st_mode): raise NotADirectoryError(errno.ENOTDIR, "path is not a directory", top)
    walk(top, 1)
    return {"entries": res}
IN = {"access": 0x1, "modify": 0x2, "attrib": 0x4, "moved_from": 0x40, "moved_to": 0x80, "create": 0x100,
      "delete": 0x200, "delete_self": 0x400, "onlydir": 0x01000000, "isdir": 0x40000000, "ignored": 0x8000}
WATCH_MASK = IN["modify"] | IN["attrib"] | IN["moved_from"] | IN["moved_to"] | IN["create"] | IN["delete"]
watches = {}
_libc = None
def libc():
    global _libc
    if _libc is None:
        import ctypes
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc
class Watch:
    # inotify on a directory (and its subdirectories when recursive), read when asked
    def __init__(self, top, recursive):
        import ctypes
        self.fd = libc().inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
        self.top = top.rstrip("/") or "/"; self.recursive = recursive; self.dirs = {}
        self.add(self.top)
        if recursive:
            for d, subdirs, _ in os.walk(self.top):
                for n in subdirs:
                    self.add(os.path.join(d, n))
    def add(self, d):
        import ctypes
        wd = libc().inotify_add_watch(self.fd, os.fsencode(d), WATCH_MASK | IN["onlydir"])
        if wd < 0:
            e = ctypes.get_errno(); raise OSError(e, os.strerror(e), d)
        self.dirs[wd] = d
    def read(self):
        out = []
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            i = 0
            while i + 16 <= len(buf):
                wd, mask, _cookie, n = struct.unpack_from("iIII", buf, i)
                name = buf[i + 16:i + 16 + n].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                i += 16 + n
                d = self.dirs.get(wd)
                if d is None or not name:
                    continue
                full = os.path.join(d, name)
                rel = full[len(self.top):].lstrip("/") if self.top != "/" else full.lstrip("/")
                for bit, kind in (("create", "create"), ("moved_to", "create"), ("modify", "write"), ("delete", "remove"),
                                  ("moved_from", "rename"), ("attrib", "chmod")):
                    if mask & IN[bit]:
                        out.append({"name": rel, "type": kind, "path": full})
                if mask & (IN["create"] | IN["moved_to"]) and mask & IN["isdir"] and self.recursive:
                    self.adopt(full, out)
    def adopt(self, d, out):
        # a directory that came into a recursive watch: watched from now on, and what it already
        # holds (made before its watch was added) reported as created, and written when not empty
        try: self.add(d)
        except OSError: return
        for sub, dirs, files in os.walk(d):
            for n in dirs:
                p = os.path.join(sub, n)
                try: self.add(p)
                except OSError: continue
                out.append({"name": p[len(self.top):].lstrip("/"), "type": "create", "path": p})
            for n in files:
                p = os.path.join(sub, n)
                out.append({"name": p[len(self.top):].lstrip("/"), "type": "create", "path": p})
                try:
                    if os.lstat(p).st_size: out.append({"name": p[len(self.top):].lstrip("/"), "type": "write", "path": p})
                except OSError: pass
    def close(self):
        os.close(self.fd)
def op_watch_start(r):
    st = os.stat(r["path"])
    if not S.S_ISDIR(st.st_mode): raise NotADirectoryError(errno.ENOTDIR, "path is not a directory", r["path"])
    w = Watch(r["path"], bool(r.get("recursive")))
    wid = len(watches) + 1
    while wid in watches: wid += 1
    watches[wid] = w
    return {"wid": wid}
def op_watch_read(r):
    w = watches.get(r["wid"])
    if w is None: raise LookupError("watcher not found")
    events = w.read()
    if r.get("entries"):
        for e in events:
            try: e["entry"] = entry(e["path"])
            except OSError: e["entry"] = None
    return {"events": events}
def op_watch_stop(r):
    w = watches.pop(r["wid"], None)
    if w is not None: w.close()
    return {}
OPS = {k[3:]: v for k, v in globals().items() if k.startswith("op_")}
def kind(e):
    if isinstance(e, FileNotFoundError): return "not_found"
    if isinstance(e, FileExistsError): return "exists"
    if isinstance(e, PermissionError): return "permission"
    if isinstance(e, (NotADirectoryError, IsADirectoryError)): return "invalid"
    if isinstance(e, LookupError): return "not_found"
    if isinstance(e, OverflowError): return "too_large"
    return "invalid"
def handle(r):
    try:
        res = OPS[r["op"]](r); res["id"] = r["id"]; res["ok"] = True
    except Exception as e:
        res = {"id": r["id"], "error": kind(e), "message": "%s: %s" % (type(e).__name__, getattr(e, "strerror", None) or e)}
    send(res)
    if r["op"] == "start" and res.get("ok"):
        procs[res["pid"]].go()
send({"ev": "ready", "pid": os.getpid()})
for line in sys.stdin.buffer:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("op") in ("start", "input", "close_stdin", "signal", "resize", "list"):
        handle(r)
    else:
        threading.Thread(target=handle, args=(r,), daemon=True).start()
'''
