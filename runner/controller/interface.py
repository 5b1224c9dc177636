"""The one Python API of runner, defined once: what Runner (local), RemoteRunner (a `runner
serve`), and their async forms AsyncRunner and AsyncRemoteRunner (runner/controller/aio.py) all
do, with the same arguments and the same types back. Moving an agent from local to hosted, or from
sync to async, changes the line that makes the runner:

    with Runner(executor="docker", workspace=".") as r:          # or RemoteRunner(url, key)
        res = r.call("bash", {"command": "make"}, on_output=print)
    async with AsyncRunner(executor="docker") as r:             # or AsyncRemoteRunner(url, key)
        res = await r.call("bash", {"command": "make"})

A method added here (an abstract one) must be written by both sync classes; the async pair
gets it from AsyncToolRunner's one implementation over the sync one. tests/unit/test_interface.py
compares the four's public methods, their parameters and their return annotations with these.

Errors: a tool's failure is a ToolResult with is_error, never raised. File operations raise the
built-in FileNotFoundError, IsADirectoryError, NotADirectoryError and PermissionError (a
protected path too); anything else runner raises on purpose is a RunnerError.
"""
from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..results import ToolResult
    from ..tools.schemas.registry import ToolSpec

# The public methods of the interface, in both forms (the test compares the four classes by these).
METHODS = ("start", "call", "cancel", "tools", "put_file", "get_file", "list_files", "update_policy", "pause", "resume", "snapshot",
           "fork", "close")


class ToolRunner(abc.ABC):
    """A session of sandboxed tools, local (Runner) or on a `runner serve` (RemoteRunner).
    `session_id`: the session's id (a RemoteRunner has it once started)."""

    session_id: str | None

    @abc.abstractmethod
    def start(self) -> "ToolRunner":
        """Open the session (the context manager does): its sandbox, or the server's session."""

    @abc.abstractmethod
    def call(self, tool: str, args: dict | None = None, *, call_id: str | None = None,
             on_output: Callable[[str], None] | None = None) -> "ToolResult":
        """Run one tool call. on_output(text): bash/exec output as it is produced. call_id: the
        id cancel() names (default: one made up)."""

    @abc.abstractmethod
    def cancel(self, call_id: str | None = None) -> bool:
        """Stop the call under way (only if it is call_id, when given), from any thread; False if
        there is none. The call returns a result with is_error and meta `cancelled`."""

    @abc.abstractmethod
    def tools(self) -> "list[ToolSpec]":
        """The specs of the tools this session allows."""

    @abc.abstractmethod
    def put_file(self, path: str, data: bytes) -> None:
        """Write a file of the workspace (path relative to it; made with its directories, or replaced)."""

    @abc.abstractmethod
    def get_file(self, path: str) -> bytes:
        """The bytes of a regular file of the workspace."""

    @abc.abstractmethod
    def list_files(self, path: str = ".") -> list[str]:
        """The names in a directory of the workspace, sorted; a directory's name ends with '/'."""

    @abc.abstractmethod
    def update_policy(self, changes: dict) -> dict:
        """Change the live session's network policy for its next connections (Runner.update_policy);
        the new network section and brokered hosts. RunnerError when the change is not allowed."""

    @abc.abstractmethod
    def pause(self) -> bool:
        """Freeze the session's sandbox (the engine's pause: no CPU) until resume() or its next
        call; False when there was nothing to freeze."""

    @abc.abstractmethod
    def resume(self) -> bool:
        """Thaw a paused session (a call does it too); False when it was not paused."""

    @abc.abstractmethod
    def snapshot(self, name: str | None = None) -> str:
        """A snapshot of the session taken now (workspace, /tmp, env and cwd): its id."""

    @abc.abstractmethod
    def fork(self, n: int = 1) -> "list[ToolRunner]":
        """n new sessions, started, each from a snapshot of this one taken now."""

    @abc.abstractmethod
    def close(self) -> None:
        """End the session and remove what it started; a call under way ends at once."""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncToolRunner:
    """The async form of a ToolRunner: each method of the interface runs the sync one on a thread
    of this session's own (so the session's calls keep their order and never hold the event
    loop), and cancelling the task that awaits a call cancels the call (its processes are gone
    when the CancelledError comes)."""

    _sync: ToolRunner

    def __init__(self, sync: ToolRunner) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._sync = sync
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runner-async")
        self._ids = 0

    @property
    def session_id(self) -> str | None:
        return self._sync.session_id

    @property
    def sync(self) -> ToolRunner:
        """The sync runner underneath (its other methods, for what is not in the interface)."""
        return self._sync

    async def _run(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        import asyncio
        import functools

        return await asyncio.get_running_loop().run_in_executor(self._thread, functools.partial(fn, *args, **kw))

    async def start(self) -> "AsyncToolRunner":
        await self._run(self._sync.start)
        return self

    async def call(self, tool: str, args: dict | None = None, *, call_id: str | None = None,
                   on_output: Callable[[str], None] | None = None) -> "ToolResult":
        """As the sync call; on_output is called on the session's thread. Cancelling the awaiting
        task stops the call (cancel) before CancelledError goes on."""
        import asyncio

        if call_id is None:
            self._ids += 1
            call_id = f"a{self._ids}"
        work = self._thread.submit(self._sync.call, tool, args, call_id=call_id, on_output=on_output)
        fut = asyncio.wrap_future(work)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if not work.cancel():  # it began: stop it, and wait for its end (its processes gone)
                await asyncio.to_thread(self._sync.cancel, call_id)
                await asyncio.wait({fut})
            raise

    def stream(self, tool: str, args: dict | None = None, *, call_id: str | None = None) -> "CallStream":
        """The call's output as an async iterator of texts, as it is produced; its result is the
        stream's `result` once the iteration ended. Leaving the iteration early cancels the call.

            async with r.stream("bash", {"command": "make"}) as s:
                async for text in s:
                    print(text, end="")
            print(s.result.is_error)
        """
        return CallStream(self, tool, args, call_id)

    async def cancel(self, call_id: str | None = None) -> bool:
        import asyncio

        return await asyncio.to_thread(self._sync.cancel, call_id)  # (not behind the call it stops)

    async def tools(self) -> "list[ToolSpec]":
        return await self._run(self._sync.tools)

    async def put_file(self, path: str, data: bytes) -> None:
        await self._run(self._sync.put_file, path, data)

    async def get_file(self, path: str) -> bytes:
        return await self._run(self._sync.get_file, path)

    async def list_files(self, path: str = ".") -> list[str]:
        return await self._run(self._sync.list_files, path)

    async def update_policy(self, changes: dict) -> dict:
        return await self._run(self._sync.update_policy, changes)

    async def pause(self) -> bool:
        return await self._run(self._sync.pause)

    async def resume(self) -> bool:
        return await self._run(self._sync.resume)

    async def snapshot(self, name: str | None = None) -> str:
        return await self._run(self._sync.snapshot, name)

    async def fork(self, n: int = 1) -> "list[AsyncToolRunner]":
        return [AsyncToolRunner(r) for r in await self._run(self._sync.fork, n)]

    async def close(self) -> None:
        """End the session; a call under way ends at once."""
        import asyncio

        try:
            await asyncio.to_thread(self._sync.close)  # (not behind the call it ends)
        finally:
            self._thread.shutdown(wait=False)

    async def __aenter__(self):
        try:
            return await self.start()
        except BaseException:
            await self.close()
            raise

    async def __aexit__(self, *exc) -> None:
        await self.close()


class CallStream:
    """One call's output as it comes (AsyncToolRunner.stream): `async for text in stream`, then
    `stream.result`. The call waits for the reader (at most MAX_PENDING texts are held)."""

    MAX_PENDING = 64

    def __init__(self, runner: AsyncToolRunner, tool: str, args: dict | None, call_id: str | None) -> None:
        self._runner, self._tool, self._args, self._call_id = runner, tool, args, call_id
        self.result: "ToolResult | None" = None
        self._gen = None

    def __aiter__(self):
        if self._gen is None:
            self._gen = self._texts()
        return self._gen

    async def aclose(self) -> None:
        """Leave the stream: a call still under way is cancelled, and has ended when this returns
        (`async with r.stream(...) as s:` does it on leaving the block; a bare `break` leaves it
        to the generator's finalizer, a moment later)."""
        if self._gen is not None:
            await self._gen.aclose()

    async def __aenter__(self) -> "CallStream":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def _texts(self):
        import asyncio

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue(self.MAX_PENDING)
        done = object()
        left = False  # the reader went away: the rest is not queued

        def on_output(text: str) -> None:  # on the session's thread: waits while the queue is full
            if not left:
                asyncio.run_coroutine_threadsafe(queue.put(text), loop).result()

        async def run():
            try:
                return await self._runner.call(self._tool, self._args, call_id=self._call_id, on_output=on_output)
            finally:
                await queue.put(done)

        task = asyncio.ensure_future(run())
        try:
            while (item := await queue.get()) is not done:
                yield item
            self.result = await task
        finally:
            left = True
            if not task.done():  # the reader left early (or was cancelled): the call is cancelled
                while not queue.empty():  # (a put the call waits on can end)
                    queue.get_nowait()
                task.cancel()
                await asyncio.wait({task})
