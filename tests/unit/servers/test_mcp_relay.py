"""Output relayed as MCP progress (runner/servers/mcp.py's relay_progress over the shared
OutputRelay): a client that does not read holds back a bounded amount, progress counts all the
output, and a report that fails ends the sending, not the call."""
from __future__ import annotations

import anyio

from runner.servers.mcp import relay_progress
from runner.servers.relay import PENDING_CHARS, OutputRelay


def test_a_client_that_reads_no_progress_keeps_memory_bounded_and_gets_the_newest_output():
    lines = [f"{i:05d} " + "x" * 994 + "\n" for i in range(2000)]  # 2 MB of output

    async def main():
        release = anyio.Event()
        sent = []

        async def report(done, total, message):
            sent.append((done, message))
            await release.wait()  # a client that does not read: the first send hangs

        relay = OutputRelay()
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay_progress, relay, report)

            def flood():  # the tool's output arrives on a worker thread, as in a call
                for line in lines:
                    relay.feed(line)

            await anyio.to_thread.run_sync(flood)
            release.set()
            relay.close()
        return sent

    sent = anyio.run(main)
    text = "".join(m for _, m in sent)
    assert PENDING_CHARS < 200_000 and len(text) < 200_000  # not the 2 MB that came
    assert "characters of output not relayed" in sent[-1][1] and sent[-1][1].endswith(lines[-1])
    assert sent[-1][0] == sum(len(line) for line in lines)  # progress counts all output, relayed or not
    assert [d for d, _ in sent] == sorted({d for d, _ in sent})  # and only grows


def test_a_report_that_fails_stops_the_sending_not_the_call():
    async def main():
        calls = []

        async def report(done, total, message):
            calls.append(message)
            raise anyio.BrokenResourceError("the client went away")

        relay = OutputRelay()
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay_progress, relay, report)
            await anyio.to_thread.run_sync(lambda: [relay.feed("a\n") for _ in range(100)])
            await anyio.sleep(0)
            await anyio.to_thread.run_sync(lambda: [relay.feed("b\n") for _ in range(100)])
            relay.close()  # relay_progress ends: the task group does not hang
        return calls

    calls = anyio.run(main)
    assert len(calls) == 1 and calls[0].startswith("a\n")
