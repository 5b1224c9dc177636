"""Tool output on the controller side: spilled to disk as it streams, truncated head+tail for
the answer, and kept for the session so the `result` tool can page through it: whole, up to the
session's `keep` bytes on disk in all (limits.output.keep). Past that a call's output is still
counted and its head and tail still answered, but no more of it goes to disk: a sandbox that
prints without end fills no controller's disk."""
from __future__ import annotations

import bisect
import collections
import os
import shutil
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import piddirs

STREAM_MAX_CHARS = 30_000  # bash/exec: TOOLS.md
STREAM_MAX_LINES = 256
OTHER_MAX_CHARS = 64 * 1024  # any other tool: read pages at 50 KiB on its own
TAIL_WINDOW = 256 * 1024  # bytes read back from the end of a spill to build the tail
PAGE_CHUNK = 1024 * 1024  # bytes read at a time when paging through a spill
DIR_PREFIX = "runner-results-"  # then the pid of the controller that made it
MARK_EVERY = 1024 * 1024  # a spill's line index notes where a line starts about every this many bytes


@dataclass
class Caps:
    chars: int = STREAM_MAX_CHARS
    lines: int | None = STREAM_MAX_LINES


class ResultStore:
    """Full outputs of one session, one file per call id; removed when the session closes.
    keep: bytes the store's files may hold in all (None: no bound). at: a lasting directory
    instead of a temporary one (runner serve's, under its --data): what it holds already is
    found and counted against keep, and close() leaves it (its owner removes it with the session)."""

    def __init__(self, keep: int | None = None, at: Path | None = None) -> None:
        self.keep = keep
        self._at = at
        self._kept: dict[str, int] = {}  # bytes on disk, by file name
        self._kept_total = 0
        self._dir: Path | None = None  # made on the first spill: most sessions never spill
        self._removal = None  # weakref.finalize that removes it: at close, at collection or at exit
        self._dir_lock = threading.Lock()
        self._owner = 0  # the pid that made the directory: only it removes it
        self._indexes: dict[Path, LineIndex] = {}  # one per spill (not per call), complete once its call finished
        self.redactor = None  # the session's (Runner sets it): what a sink gives on_output is redacted by it
        if at is not None:
            self._adopt(at)

    def _adopt(self, at: Path) -> None:
        """Find what a lasting store holds (a previous process's outputs): paged as they are, counted."""
        try:
            found = [(e.name, e.stat(follow_symlinks=False).st_size) for e in os.scandir(at)
                     if e.is_file(follow_symlinks=False)]
        except FileNotFoundError:
            return
        self._dir = at
        for name, size in found:
            self._kept[name] = size
            self._kept_total += size

    @property
    def dir(self) -> Path:
        """The store's directory (`runner-results-<pid>-...` in the temp dir), made on first use.
        A store never closed (its Runner was not) removes it when it is collected or the process
        exits; what a killed process left, `runner gc` removes (sweep)."""
        with self._dir_lock:
            if self._dir is None and self._at is not None:
                self._at.mkdir(parents=True, exist_ok=True, mode=0o700)
                self._dir = self._at
            if self._dir is None:
                made = Path(piddirs.make(DIR_PREFIX))
                self._owner = os.getpid()
                self._removal = weakref.finalize(self, _remove, str(made), self._owner)
                self._dir = made
            return self._dir

    def path(self, call_id: str) -> Path:
        return self.dir / _file_name(call_id)

    def sink(self, call_id: str, caps: Caps, on_output: Callable[[str], None] | None = None) -> "OutputSink":
        """Where one call's output goes. on_output (Runner.call's): given the output as it is
        written, redacted by the store's redactor (a secret split across writes included)."""
        d = self._dir
        if d is not None and (self._indexes or self._kept):
            # An earlier output of this id goes now, its index and its bytes with it: the new one
            # replaces it, spilled or not (else ids used again, each once with a big output, kept
            # more than `keep` on disk).
            old = d / _file_name(call_id)
            self._indexes.pop(old, None)
            with self._dir_lock:
                self._kept_total -= self._kept.pop(old.name, 0)
            old.unlink(missing_ok=True)

        def kept(path: Path, index: LineIndex) -> None:  # only an output that spills is kept, with its index
            self._indexes[path] = index

        # the file's name is worked out only when the output spills (most never do)
        take = None if self.keep is None else (lambda n: self._take(call_id, n))
        sink = OutputSink(lambda: self.path(call_id), call_id, caps, on_spill=kept, take=take)
        if on_output is not None:
            from ..reporting.redact import Redactor, StreamRedactor

            sink.on_output = on_output
            sink.stream = StreamRedactor(self.redactor or Redactor(), sink._give)
        return sink

    def _take(self, call_id: str, n: int) -> int:
        """How many of n more bytes of call_id's output may go to disk under keep (counted)."""
        with self._dir_lock:
            got = max(0, min(n, self.keep - self._kept_total))
            if got:
                name = _file_name(call_id)
                self._kept[name] = self._kept.get(name, 0) + got
                self._kept_total += got
            return got

    def page(self, call_id: str, offset: int = 1, limit: int = 2000, max_chars: int = 50 * 1024) -> str | None:
        """Lines offset.. of a kept output, or None if there is none for that call id. The page
        holds at most `limit` lines and `max_chars` bytes of them (so at most that many
        characters), a longer line cut with a notice; the file is read in chunks, never whole."""
        d = self._dir
        if d is None:  # nothing spilled yet (or the store is closed)
            return None
        p = d / _file_name(call_id)
        if not p.exists():
            return None
        out = bytearray()
        line = 1  # the number of the line that starts at `pos`
        size, ends_nl, cut = 0, True, False
        index = self._indexes.get(p)
        known = index is not None and index.total is not None  # else (still streaming): scan it all
        with open(p, "rb") as f:
            if known:  # start at the last noted line start at or before `offset`: no scan from the top
                line, start = index.start_for(offset)
                f.seek(start)
            while chunk := f.read(PAGE_CHUNK):
                size += len(chunk)
                ends_nl = chunk.endswith(b"\n")
                pos = 0
                if line < offset:  # skip to the first wanted line
                    if chunk.count(b"\n") < offset - line:
                        line += chunk.count(b"\n")
                        continue
                    while line < offset:
                        pos = chunk.index(b"\n", pos) + 1
                        line += 1
                while offset <= line < offset + limit and not cut and pos < len(chunk):
                    nl = chunk.find(b"\n", pos)
                    end = len(chunk) if nl < 0 else nl + 1
                    room = max_chars - len(out)
                    if end - pos > room:
                        out += chunk[pos:pos + room]
                        pos += room
                        cut = True
                        break
                    out += chunk[pos:end]
                    pos = end
                    if nl < 0:
                        break
                    line += 1
                if known and (cut or line >= offset + limit):
                    break  # the page is full, and the total is known without reading on
                line += chunk.count(b"\n", pos)
        if known:
            size, total = index.size, index.total
        else:
            total = line - 1 + (0 if ends_nl or not size else 1)
        if size == 0:
            return "(the output was empty)"
        if offset > total:
            return f"offset {offset} is past the end: the output of {call_id} has {total} lines"
        text = out.decode("utf-8", errors="replace")
        if cut:
            shown = offset + text.count("\n")
            nxt = shown + 1
            more = f"continue with offset {nxt}" if nxt <= total else "end of output"
            return text + (f"\n[line {shown} is cut here: a page holds at most {max_chars} characters; "
                           f"lines {offset}-{shown} of {total}; {more}]")
        last = min(offset + limit - 1, total)
        if last < total:
            return text + f"\n[lines {offset}-{last} of {total}; continue with offset {last + 1}]"
        return text + f"\n[lines {offset}-{last} of {total}; end of output]"

    def close(self) -> None:
        """Remove the directory. Idempotent, and a close cut short (a signal in the middle: the
        Runner runs the step again) finishes the removal when it runs again."""
        with self._dir_lock:
            d, removal = self._dir, self._removal
        if d is None:
            return
        if self._at is not None:  # a lasting store stays on disk
            with self._dir_lock:
                self._dir = None
                self._indexes.clear()
                self._kept.clear()
                self._kept_total = 0
            return
        _remove(str(d), self._owner)  # here, not through the finalizer: it may have run (or be dead)
        removal.detach()
        with self._dir_lock:
            if self._dir == d:
                self._dir, self._removal = None, None
                self._indexes.clear()
                self._kept.clear()
                self._kept_total = 0


def _file_name(call_id: str) -> str:
    return ("".join(ch for ch in call_id if ch.isalnum() or ch in "-_.")[:100] or "call") + ".out"


def _remove(path: str, owner: int) -> None:
    """A store's removal, in the process that made it only: a child forked without exec that
    exits normally runs its parent's exit hooks too, and must not take the parent's store."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def sweep(dry_run: bool = False) -> list[tuple[str, str]]:
    """The result stores of controllers that are gone (killed before they could close them),
    removed unless dry_run: (path, why) of each."""
    return piddirs.sweep(tempfile.gettempdir(), DIR_PREFIX, dry_run)


class OutputSink:
    """Receives text as it comes. Small outputs stay in memory; past the caps everything goes
    to a spill file on disk, so memory stays flat however much arrives."""

    def __init__(self, place: Callable[[], Path], call_id: str, caps: Caps,
                 on_spill: "Callable[[Path, LineIndex], None] | None" = None,
                 take: "Callable[[int], int] | None" = None) -> None:
        self.place, self.call_id, self.caps = place, call_id, caps
        self.path: Path | None = None  # the spill's, once there is one
        self.stream = None  # a StreamRedactor to _give, when the caller asked for the output as it comes
        self.on_output: Callable[[str], None] | None = None  # the caller's (ResultStore.sink)
        self.output_error: str | None = None  # what on_output raised: it was given no more of this output
        self.on_spill = on_spill
        self.take = take  # how many bytes of a piece may go to disk (ResultStore._take); None: all
        self.index = LineIndex()  # of what went to disk
        self.f = None
        self.buf: list[str] = []
        self.chars = 0
        self.newlines = 0
        self.ends_with_newline = True
        # Once it spills, the answer's head and tail come from memory: the output's first bytes
        # (enough for the head) and its last TAIL_WINDOW bytes, whatever the disk kept.
        self.first = b""
        self.last: collections.deque[bytes] = collections.deque()
        self.last_size = 0
        self.dropped = 0  # bytes not kept on disk (past the store's keep)

    def write(self, text: str) -> None:
        if not text:
            return
        if self.stream is not None:
            self.stream.feed(text)
        self.chars += len(text)
        self.ends_with_newline = text.endswith("\n")
        if self.f is None:
            self.newlines += text.count("\n")
            self.buf.append(text)
            if self.chars <= self.caps.chars and (self.caps.lines is None or self.newlines <= self.caps.lines):
                return
            self.path = self.place()
            self.f = open(self.path, "wb")
            if self.on_spill is not None:
                self.on_spill(self.path, self.index)
            data = "".join(self.buf).encode("utf-8", "replace")
            self.buf = []
            self.first = data[:4 * self.caps.chars]  # the head is at most half the caps' characters
        else:
            data = text.encode("utf-8", "replace")
            self.newlines += data.count(b"\n")
        self.last.append(data)
        self.last_size += len(data)
        while self.last_size - len(self.last[0]) >= TAIL_WINDOW:
            self.last_size -= len(self.last.popleft())
        n = len(data) if self.take is None else self.take(len(data))
        if n < len(data):
            self.dropped += len(data) - n
            data = data[:n]
        if data:
            self.index.feed(data)
            self.f.write(data)

    def _give(self, text: str) -> None:
        """Redacted text to the caller's on_output. One that raises (an Exception) is dropped for
        the rest of this output and noted (finish's meta: on_output_error); the call goes on."""
        if not text or self.on_output is None:
            return
        try:
            self.on_output(text)
        except Exception as e:
            self.on_output = None
            self.output_error = f"{type(e).__name__}: {e}"[:500]

    @property
    def lines(self) -> int:
        return self.newlines + (0 if self.ends_with_newline else 1) if self.chars else 0

    def finish(self) -> tuple[str, dict]:
        """(text for the answer, truncation meta). Whole if within caps, else head + notice + tail."""
        caps = self.caps
        meta = {"output_chars": self.chars, "output_lines": self.lines, "truncated": False}
        if self.stream is not None:
            self.stream.flush()
            self.stream = None
        if self.output_error is not None:
            meta["on_output_error"] = self.output_error
        if self.f is None:
            return "".join(self.buf), meta
        self.f.close()
        self.index.finish()
        head_chars, tail_chars = caps.chars // 2, caps.chars - caps.chars // 2
        head_lines = tail_lines = None
        if caps.lines is not None:
            head_lines, tail_lines = caps.lines // 2, caps.lines - caps.lines // 2
        head = _head(self.first, head_chars, head_lines)
        tail = _tail(b"".join(self.last)[-TAIL_WINDOW:], tail_chars, tail_lines)
        removed_chars = max(0, self.chars - len(head) - len(tail))
        removed_lines = max(0, self.lines - head.count("\n") - tail.count("\n") - (0 if self.ends_with_newline else 1))
        tail_start = self.lines - tail.count("\n") - (0 if self.ends_with_newline else 1) + 1
        kept = "The full output is kept" if not self.dropped else (
            f"Its first {self.index.size} bytes are kept, not the {self.dropped} after them (a session keeps "
            "at most limits.output.keep bytes of output)")
        notice = (f"\n[... {removed_lines} lines ({removed_chars} characters) cut from the middle of "
                  f"{self.lines} lines. {kept}: call the result tool with "
                  f'{{"call_id": "{self.call_id}", "offset": {head.count(chr(10)) + 1}}} to read on; '
                  f"the tail below starts at line {tail_start} ...]\n")
        meta.update(truncated=True, removed_chars=removed_chars, removed_lines=removed_lines, kept_as=self.call_id)
        if self.dropped:
            meta["not_kept_bytes"] = self.dropped
        return head + notice + tail, meta


class LineIndex:
    """Where lines start in a spill, noted as it is written: (line number, byte offset) of the
    first line that starts past every MARK_EVERY bytes, so a page seeks near its offset instead
    of reading the file from the top. A few KiB per GB of output; `total` is set at the end."""

    def __init__(self) -> None:
        self.marks: list[tuple[int, int]] = [(1, 0)]
        self.size = 0  # bytes written
        self.newlines = 0  # seen in them
        self.next_mark = MARK_EVERY
        self.ends_nl = True
        self.total: int | None = None  # lines, once the output is complete

    def feed(self, data: bytes) -> None:
        start, end = self.size, self.size + len(data)
        while self.next_mark < end:
            nl = data.find(b"\n", max(self.next_mark - start, 0))
            if nl < 0:
                break  # no line starts past the mark in this piece: the next piece's first one will
            line = self.newlines + data.count(b"\n", 0, nl + 1) + 1
            self.marks.append((line, start + nl + 1))
            self.next_mark = start + nl + 1 + MARK_EVERY
        self.newlines += data.count(b"\n")
        self.size = end
        if data:
            self.ends_nl = data.endswith(b"\n")

    def finish(self) -> None:
        self.total = self.newlines + (0 if self.ends_nl or not self.size else 1)

    def start_for(self, offset: int) -> tuple[int, int]:
        """The last noted (line, byte offset) at or before line `offset`."""
        i = bisect.bisect_right(self.marks, (offset, float("inf"))) - 1
        return self.marks[max(i, 0)]


def _head(data: bytes, max_chars: int, max_lines: int | None) -> str:
    """The first max_chars characters (and max_lines lines) of an output that starts with data."""
    text = data.decode("utf-8", errors="replace")[:max_chars]
    if max_lines is not None:
        parts = text.split("\n")
        if len(parts) > max_lines:
            text = "\n".join(parts[:max_lines]) + "\n"
    return text


def _tail(data: bytes, max_chars: int, max_lines: int | None) -> str:
    """The last max_chars characters (and max_lines lines) of an output that ends with data."""
    text = data.decode("utf-8", errors="ignore")[-max_chars:]
    if max_lines is not None:
        parts = text.split("\n")
        keep = max_lines + (1 if text.endswith("\n") else 0)
        if len(parts) > keep:
            text = "\n".join(parts[-keep:])
    return text
