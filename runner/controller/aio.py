"""The async forms of Runner and RemoteRunner: the same arguments, the same methods as
coroutines (runner/controller/interface.py's AsyncToolRunner, written once for both).

    async with AsyncRunner(executor="docker", workspace=".") as r:     # or AsyncRemoteRunner(url, key)
        res = await r.call("bash", {"command": "make"})
        s = r.stream("bash", {"command": "make test"})
        async for text in s:
            print(text, end="")

Each session's operations run in order on a thread of its own; many sessions run at once.
Cancelling the task that awaits a call stops the call (its processes gone, as Runner.cancel)
before CancelledError goes on.
"""
from __future__ import annotations

from typing import Any

from .interface import AsyncToolRunner


class AsyncRunner(AsyncToolRunner):
    """Runner's arguments; its Runner is `sync` (its other methods: warnings, refresh_tools, ...)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        from .core import Runner

        super().__init__(Runner(*args, **kw))


class AsyncRemoteRunner(AsyncToolRunner):
    """RemoteRunner's arguments (url, key, policy, session=...)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        from ..client import RemoteRunner

        super().__init__(RemoteRunner(*args, **kw))
