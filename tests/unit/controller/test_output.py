"""Controller-side output: spill to disk, head+tail truncation, paging with the result tool."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import tempfile
import tracemalloc
import weakref

import pytest

from runner.controller import output
from runner.controller.output import Caps, ResultStore


def test_small_output_comes_back_whole():
    store = ResultStore()
    try:
        sink = store.sink("c1", Caps(100, 10))
        sink.write("a\n")
        sink.write("b")
        text, meta = sink.finish()
        assert text == "a\nb" and meta == {"output_chars": 3, "output_lines": 2, "truncated": False}
    finally:
        store.close()


def test_too_many_lines_keep_head_and_tail_with_a_notice():
    store = ResultStore()
    try:
        sink = store.sink("c7", Caps(30_000, 256))
        for i in range(1, 1001):
            sink.write(f"line {i}\n")
        text, meta = sink.finish()
        lines = text.splitlines()
        assert lines[0] == "line 1" and lines[127] == "line 128"
        assert lines[-1] == "line 1000" and lines[-128] == "line 873"
        assert meta["truncated"] and meta["removed_lines"] == 1000 - 256 and meta["output_lines"] == 1000
        notice = next(line for line in lines if line.startswith("[..."))
        assert "744 lines" in notice and '"call_id": "c7"' in notice and '"offset": 129' in notice
        page = store.page("c7", offset=129, limit=3)
        assert page.startswith("line 129\nline 130\nline 131\n") and "continue with offset 132" in page
        assert "offset 2000 is past the end" in store.page("c7", offset=2000)
        assert store.page("nope") is None
    finally:
        store.close()


def test_a_session_keeps_no_more_than_keep_bytes_on_disk():
    """What a sandbox prints without end fills no controller disk: the store's files hold at most
    `keep` bytes in all (limits.output.keep; a 20 s `yes` left 5.75 GiB in the temp dir), the
    answer still has the output's head and its true tail, and the counts are of all of it."""
    store = ResultStore(keep=100_000)
    try:
        sink = store.sink("c1", Caps(1000, 50))
        for i in range(1, 20_001):
            sink.write(f"line {i:05d}\n")  # 11 bytes a line: 220,000 in all
        text, meta = sink.finish()
        assert store.path("c1").stat().st_size == 100_000
        assert meta["output_lines"] == 20_000 and meta["output_chars"] == 220_000
        assert meta["not_kept_bytes"] == 120_000 and meta["truncated"]
        lines = text.splitlines()
        assert lines[0] == "line 00001" and lines[-1] == "line 20000" and lines[-25] == "line 19976"
        assert "Its first 100000 bytes are kept, not the 120000 after them" in text
        page = store.page("c1", offset=9090, limit=20)
        assert page.startswith("line 09090\n") and "of 9091" in page  # what the disk holds: 9090 lines and a bit
        other = store.sink("c2", Caps(1000, 50))  # the session's keep is spent: nothing more goes to disk
        for i in range(1, 201):
            other.write(f"other {i}\n")
        text, meta = other.finish()
        assert store.path("c2").stat().st_size == 0 and meta["not_kept_bytes"] == sum(len(f"other {i}\n") for i in range(1, 201))
        assert text.startswith("other 1\n") and text.endswith("other 200\n")
        again = store.sink("c1", Caps(1000, 50))  # an output of the same id replaces the first: its bytes are free
        for _ in range(100):
            again.write("z" * 99 + "\n")
        _, meta = again.finish()
        assert store.path("c1").stat().st_size == 10_000 and "not_kept_bytes" not in meta
        for n in range(5):  # an id used again with a short output: its old file goes, not just its count
            big = store.sink(f"x{n}", Caps(100, 5))
            big.write("y" * 50_000)
            big.finish()
            store.sink(f"x{n}", Caps(100, 5)).write("short")
        assert sum(p.stat().st_size for p in store.dir.iterdir()) <= 100_000
    finally:
        store.close()


def test_too_many_characters_on_few_lines():
    store = ResultStore()
    try:
        sink = store.sink("c2", Caps(1000, 256))
        sink.write("x" * 5000 + "\n" + "y" * 5000)
        text, meta = sink.finish()
        assert text.startswith("x" * 500) and text.endswith("y" * 500) and meta["removed_chars"] == 10001 - 1000
    finally:
        store.close()


def test_a_100_mb_flood_keeps_memory_flat():
    store = ResultStore()
    chunk = ("0123456789" * 6553 + "\n") * 2  # ~131 KB
    tracemalloc.start()
    try:
        sink = store.sink("flood", Caps())
        tracemalloc.reset_peak()
        written = 0
        while written < 100 * 1024 * 1024:
            sink.write(chunk)
            written += len(chunk)
        text, meta = sink.finish()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        store.close()
    assert meta["truncated"] and meta["output_chars"] == written
    assert len(text) < 32_000
    assert peak < 4 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"


def test_store_is_removed_on_close():
    store = ResultStore()
    sink = store.sink("c1", Caps(10, 2))
    sink.write("a\nb\nc\nd\n")
    sink.finish()
    made = store.path("c1")
    assert made.exists()
    store.close()
    assert not made.exists() and not made.parent.exists()


def _spill(store, call_id: str, pieces: list[str]):
    sink = store.sink(call_id, Caps(100, 10))
    for piece in pieces:
        sink.write(piece)
    sink.finish()
    return store._indexes[store.path(call_id)]


def test_pages_from_the_line_index_are_those_of_a_scan_from_the_top():
    """A finished spill is paged from its line index (a seek near the offset); every page, at
    every noted line start and either side of it, is the page a scan from the top gives."""
    import random

    rnd = random.Random(7)
    lines = []
    for i in range(60_000):
        kind = rnd.random()
        body = ("é" * rnd.randint(0, 40) if kind < 0.3 else "x" * rnd.randint(2000, 9000) if kind < 0.32
                else f"line {i} " + "-" * rnd.randint(0, 60))
        lines.append(body + "\n")
    text = "".join(lines) + "no newline at the end"
    pieces, at = [], 0
    while at < len(text):
        n = rnd.randint(1, 300_000)
        pieces.append(text[at:at + n])
        at += n
    store = ResultStore()
    try:
        index = _spill(store, "c9", pieces)
        assert len(index.marks) > 4 and index.total == len(lines) + 1
        offsets = {1, 2, index.total - 1, index.total, index.total + 1}
        for line, _ in index.marks:
            offsets |= {line - 1, line, line + 1}
        for offset in sorted(o for o in offsets if o >= 1):
            for limit, max_chars in ((1, 50 * 1024), (3, 50 * 1024), (2000, 50 * 1024), (50, 3000)):
                fast = store.page("c9", offset, limit, max_chars)
                total, index.total = index.total, None  # the scan from the top
                try:
                    slow = store.page("c9", offset, limit, max_chars)
                finally:
                    index.total = total
                assert fast == slow, (offset, limit, max_chars)
        assert store.page("c9", 5, 1) == lines[4] + f"\n[lines 5-5 of {index.total}; continue with offset 6]"
    finally:
        store.close()


def test_a_page_far_into_a_spill_does_not_read_it_from_the_top():
    """Blank the spill's first MiB after it was written (same size, no newlines): a page past it
    is unchanged, which a scan counting lines from the top could not give."""
    store = ResultStore()
    try:
        index = _spill(store, "c3", [f"line {i}\n" for i in range(400_000)])
        want = store.page("c3", 300_000, 2)
        assert want.startswith("line 299999\nline 300000\n")
        with open(store.path("c3"), "r+b") as f:
            f.write(b"z" * (1024 * 1024))
        assert index.marks[1][1] >= 1024 * 1024
        assert store.page("c3", 300_000, 2) == want
    finally:
        store.close()


def test_the_store_keeps_an_index_for_spilled_outputs_only():
    """A session's store noted a line index for every call, kept until the session closed: a
    server's long session grew by one for each of its calls (failed before: 1000 indexes)."""
    store = ResultStore()
    try:
        for i in range(1000):
            sink = store.sink(f"c{i}", Caps(100, 10))
            sink.write("small\n")
            sink.finish()
        assert store._indexes == {}
        _spill(store, "big", ["x" * 50 + "\n"] * 5)
        assert list(store._indexes) == [store.path("big")]
    finally:
        store.close()


def test_a_store_makes_its_directory_only_when_an_output_spills(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    store = ResultStore()
    try:
        sink = store.sink("small", Caps(100, 10))
        sink.write("hi\n")
        sink.finish()
        assert store.page("small") is None and list(tmp_path.iterdir()) == []
        _spill(store, "big", ["line\n"] * 100)
        (made,) = tmp_path.iterdir()
        assert made.name.startswith(f"runner-results-{os.getpid()}.") and (made / "big.out").is_file()
        assert store.page("big", limit=1).startswith("line\n")
    finally:
        store.close()
    assert list(tmp_path.iterdir()) == []


def test_a_store_never_closed_removes_its_directory_when_collected(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    store = ResultStore()
    _spill(store, "big", ["line\n"] * 100)
    assert len(list(tmp_path.iterdir())) == 1
    del store
    gc.collect()
    assert list(tmp_path.iterdir()) == []


def test_a_process_that_exits_without_closing_its_runner_leaves_no_store(tmp_path):
    """A Runner the program never closed (its store still referenced at exit) removes the store's
    directory as the interpreter exits."""
    ws = tmp_path / "ws"
    ws.mkdir()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = ("import sys\nfrom runner import Runner\n"
            "r = Runner(executor='local', workspace=sys.argv[1])\n"
            "r.store.sink('c1', __import__('runner.controller.output').controller.output.Caps(10, 2)).write('x\\n' * 100)\n"
            "print(r.store.dir)\n")
    out = subprocess.run([sys.executable, "-c", code, str(ws)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "TMPDIR": str(tmp)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(tmp / "runner-results-"))
    assert list(tmp.iterdir()) == []


def test_runner_gc_removes_the_result_stores_of_dead_controllers(tmp_path, monkeypatch):
    """Only `runner-results-<pid>-...` directories of this user whose pid is gone: not a live
    process's, not a symlink by that name (it could point anywhere), not another user's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = tmp_path / f"runner-results-{dead.pid}-abc"
    (gone / "sub").mkdir(parents=True)
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("x")
    (gone / "sub" / "link").symlink_to(target)  # a link inside is removed, never followed
    live = tmp_path / f"runner-results-{os.getpid()}-abc"
    live.mkdir()
    link = tmp_path / f"runner-results-{dead.pid}-link"
    link.symlink_to(target)
    other = tmp_path / f"runner-results-{dead.pid}-other"
    other.mkdir()
    os.chown(other, 65534, 65534)
    unrelated = tmp_path / f"runner-resultsX{dead.pid}-abc"
    unrelated.mkdir()
    assert output.sweep(dry_run=True) == [(str(gone), f"its controller (pid {dead.pid}) is gone")]
    assert gone.is_dir()
    assert output.sweep() == [(str(gone), f"its controller (pid {dead.pid}) is gone")]
    assert not gone.exists() and (target / "keep").read_text() == "x"
    assert live.is_dir() and link.is_symlink() and other.is_dir() and unrelated.is_dir()


def test_a_forked_child_that_exits_leaves_its_parents_store(tmp_path):
    """A child forked without exec (multiprocessing's fork, a library's) runs the exit hooks it
    inherited when it exits normally: the parent's store must survive that, and go at its exit."""
    code = ("import os, sys, tempfile\n"
            "tempfile.tempdir = sys.argv[1]\n"
            "from runner.controller.output import Caps, ResultStore\n"
            "s = ResultStore()\n"
            "s.sink('c', Caps(10, 2)).write('x\\n' * 100)\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    sys.exit(0)\n"  # a normal exit: the inherited atexit hooks run
            "os.waitpid(pid, 0)\n"
            "assert 'lines 1-1 of 100' in (s.page('c', limit=1) or ''), 'the forked child removed the store'\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_close_cut_short_finishes_the_removal_when_run_again(tmp_path, monkeypatch):
    """Runner.close runs a step again when a signal cut it short: the store's second close
    removes what the first did not."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    store = ResultStore()
    _spill(store, "big", ["line\n"] * 100)
    real = output._remove

    def interrupted(path: str, owner: int) -> None:
        monkeypatch.setattr(output, "_remove", real)
        raise KeyboardInterrupt

    monkeypatch.setattr(output, "_remove", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.close()
    assert len(list(tmp_path.iterdir())) == 1
    store.close()
    assert list(tmp_path.iterdir()) == [] and store.page("big") is None


def test_a_store_closed_after_the_exit_hooks_ran_is_still_removed(tmp_path, monkeypatch):
    """A program's own exit hook that spills an output and closes its Runner runs after
    weakref's exit hook, when a finalizer does nothing any more: close removes it itself."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(weakref.finalize, "_shutdown", True)
    store = ResultStore()
    _spill(store, "big", ["line\n"] * 100)
    store.close()
    assert list(tmp_path.iterdir()) == []


def test_a_lasting_store_outlives_its_process_and_stays_bounded(tmp_path):
    """runner serve's store (at=, under --data): close() leaves it, a later store at the same
    place pages what it holds and counts it against keep (a restart does not reset the bound)."""
    at = tmp_path / "kept" / "t" / "s1"
    first = ResultStore(keep=1000, at=at)
    assert first.page("c1") is None and not at.exists()  # nothing made before a spill
    sink = first.sink("c1", Caps(10, 2))
    sink.write("".join(f"{i}\n" for i in range(1, 201)))  # 692 bytes
    sink.finish()
    first.close()
    assert (at / "c1.out").stat().st_size == 692
    again = ResultStore(keep=1000, at=at)
    assert again.page("c1", offset=199, limit=5).startswith("199\n200\n")
    more = again.sink("c2", Caps(10, 2))
    more.write("x" * 999 + "\n")
    _, meta = more.finish()
    assert (at / "c2.out").stat().st_size == 308 and meta["not_kept_bytes"] == 692  # 1000 - 692 left
    again.close()
    assert sorted(p.name for p in at.iterdir()) == ["c1.out", "c2.out"]
