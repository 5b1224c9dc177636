"""AsyncRunner against the real engine: many calls over several sessions at once, output as an
async iterator, and asyncio cancellation stopping the call's processes."""
from __future__ import annotations

import asyncio

import pytest

from runner import AsyncRunner

from .test_cancel import sleeping, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_gather_of_twenty_calls_over_five_sessions(tmp_path):
    async def main():
        runners = []
        for n in range(5):
            (tmp_path / str(n)).mkdir()
            runners.append(AsyncRunner(executor="docker", workspace=tmp_path / str(n)))
        await asyncio.gather(*(r.start() for r in runners))
        try:
            return await asyncio.gather(*(runners[i % 5].call("bash", {"command": f"echo {i} >> log; echo {i}"})
                                          for i in range(20)))
        finally:
            await asyncio.gather(*(r.close() for r in runners))

    results = asyncio.run(main())
    assert [r.text.strip() for r in results] == [str(i) for i in range(20)]
    for n in range(5):  # each session's calls in its own workspace, in the order they were made
        assert (tmp_path / str(n) / "log").read_text().split() == [str(i) for i in range(n, 20, 5)]


def test_cancelling_the_task_stops_the_call_and_the_session_goes_on(tmp_path):
    token = "4321"

    async def main():
        async with AsyncRunner(executor="docker", workspace=tmp_path) as r:
            await r.call("bash", {"command": "true"})
            task = asyncio.ensure_future(r.call("bash", {"command": f"touch started; sleep {token}; touch after"}))
            await asyncio.to_thread(wait_for, lambda: (tmp_path / "started").exists() and sleeping(token))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            gone = sleeping(token)  # when CancelledError came
            after = await r.call("bash", {"command": "ps ax -o args; echo next"})
            return gone, after

    gone, after = asyncio.run(main())
    assert gone == []
    assert f"sleep {token}" not in after.text and after.text.strip().endswith("next")
    assert not (tmp_path / "after").exists()


def test_stream_gives_output_as_it_comes_and_leaving_it_cancels_the_call(tmp_path):
    token = "4322"

    async def main():
        async with AsyncRunner(executor="docker", workspace=tmp_path) as r:
            s = r.stream("bash", {"command": "echo one; touch go-on; echo two"})
            texts = [t async for t in s]
            async with r.stream("bash", {"command": f"echo first; sleep {token}; touch after"}) as long:
                first = None
                async for text in long:
                    first = text
                    await asyncio.to_thread(wait_for, lambda: sleeping(token))
                    break  # the reader leaves (and the block): the call is cancelled
            gone = sleeping(token)
            nxt = await r.call("bash", {"command": "echo next"})
            return texts, s.result, first, gone, nxt

    texts, result, first, gone, nxt = asyncio.run(main())
    assert "".join(texts) == "one\ntwo\n" and not result.is_error
    assert first == "first\n" and gone == [] and nxt.text == "next\n"  # gone when the block was left
    assert not (tmp_path / "after").exists()
