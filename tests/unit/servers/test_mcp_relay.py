"""Output relayed as MCP progress: a client that does not read holds back a bounded amount."""
from __future__ import annotations

import anyio

from runner.servers.mcp import PENDING_PROGRESS_CHARS, ProgressRelay


def test_a_client_that_reads_no_progress_keeps_memory_bounded_and_gets_the_newest_output():
    lines = [f"{i:05d} " + "x" * 994 + "\n" for i in range(2000)]  # 2 MB of output

    async def main():
        release = anyio.Event()
        sent = []

        async def report(done, total, message):
            sent.append((done, message))
            await release.wait()  # a client that does not read: the first send hangs

        relay = ProgressRelay(report)
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay.run)

            def flood():  # the tool's output arrives on a worker thread, as in a call
                for line in lines:
                    relay.feed(line)

            await anyio.to_thread.run_sync(flood)
            release.set()
            relay.stop()
        return sent

    sent = anyio.run(main)
    text = "".join(m for _, m in sent)
    assert PENDING_PROGRESS_CHARS < 200_000 and len(text) < 200_000  # not the 2 MB that came
    assert "characters of output not relayed" in sent[-1][1] and sent[-1][1].endswith(lines[-1])
    assert sent[-1][0] == sum(len(line) for line in lines)  # progress counts all output, relayed or not


def test_one_piece_larger_than_the_bound_keeps_its_end():
    async def main():
        sent = []

        async def report(done, total, message):
            sent.append(message)

        relay = ProgressRelay(report)
        await anyio.to_thread.run_sync(relay.feed, "a" * 10 * PENDING_PROGRESS_CHARS + "END\n")
        relay.stop()
        await relay.run()
        return sent

    sent = anyio.run(main)
    assert len(sent) == 1 and sent[0].endswith("aEND\n") and len(sent[0]) < PENDING_PROGRESS_CHARS + 100
    assert f"{9 * PENDING_PROGRESS_CHARS + 4} characters of output not relayed" in sent[0]


def test_a_report_that_fails_stops_the_relay_not_the_call():
    async def main():
        async def report(done, total, message):
            raise anyio.BrokenResourceError("the client went away")

        relay = ProgressRelay(report)
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay.run)
            await anyio.to_thread.run_sync(lambda: [relay.feed("a\n") for _ in range(100)])
            relay.stop()
        return relay.report

    assert anyio.run(main) is None
