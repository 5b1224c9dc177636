"""The one relay of streamed output to the servers (runner/servers/relay.py): fed on a worker thread
(Runner.call's on_output), taken in order on the event loop, bounded (the newest output kept, a
note of what was dropped), ended by close(). And no server sets the store's attribute any more:
streaming is Runner.call's parameter."""
from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path

import runner
from runner.servers.relay import PENDING_CHARS, OutputRelay


def run(coro):
    return asyncio.run(coro)


def test_pieces_fed_on_a_thread_arrive_in_order_and_the_stream_ends_at_close():
    async def main():
        relay = OutputRelay()
        got: list[str] = []

        async def consume():
            async for text in relay.chunks():
                got.append(text)

        consumer = asyncio.ensure_future(consume())

        def produce():
            for i in range(500):
                relay.feed(f"{i}\n")
            relay.close()
            relay.feed("after close\n")  # a call abandoned by its request may go on: dropped

        await asyncio.to_thread(produce)
        await consumer
        return "".join(got), relay

    text, relay = run(main())
    assert text == "".join(f"{i}\n" for i in range(500))
    assert relay.total == len(text) == relay.through


def test_a_consumer_that_does_not_read_holds_back_a_bounded_amount_and_gets_the_newest():
    lines = [f"{i:05d} " + "x" * 994 + "\n" for i in range(2000)]  # 2 MB of output

    async def main():
        relay = OutputRelay()
        await asyncio.to_thread(lambda: [relay.feed(line) for line in lines])  # nobody reads meanwhile
        relay.close()
        return [t async for t in relay.chunks()], relay

    chunks, relay = run(main())
    assert len(chunks) == 1 and len(chunks[0]) < PENDING_CHARS + 100  # not the 2 MB that came
    assert chunks[0].startswith("[... ") and "characters of output not relayed" in chunks[0]
    assert chunks[0].endswith(lines[-1]) and relay.through == sum(map(len, lines))  # all counted


def test_one_piece_larger_than_the_bound_keeps_its_end():
    async def main():
        relay = OutputRelay()
        await asyncio.to_thread(relay.feed, "a" * 10 * PENDING_CHARS + "END\n")
        relay.close()
        return [t async for t in relay.chunks()]

    sent = run(main())
    assert len(sent) == 1 and sent[0].endswith("aEND\n") and len(sent[0]) < PENDING_CHARS + 100
    assert f"{9 * PENDING_CHARS + 4} characters of output not relayed" in sent[0]


def test_a_feed_after_the_loop_is_gone_neither_raises_nor_blocks():
    async def make():
        return OutputRelay()

    relay = run(make())  # asyncio.run closed its loop
    done = threading.Event()

    def feed():
        relay.feed("late\n")
        relay.close()
        done.set()

    t = threading.Thread(target=feed)
    t.start()
    t.join()
    assert done.is_set() and relay.take() == "late\n"


def test_no_module_sets_the_result_stores_on_output_any_more():
    """Streaming is Runner.call's on_output: no server (nor anything else) overwrites an
    attribute of the store, which a concurrent call or another consumer would see."""
    root = Path(runner.__file__).parent
    pattern = re.compile(r"store\.on_output|\.on_output\s*=(?!=)")
    found = [f"{p.relative_to(root)}:{n}" for p in root.rglob("*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if pattern.search(line) and "self.on_output" not in line and "sink.on_output" not in line]
    assert found == []
    from runner.controller.output import ResultStore

    assert not hasattr(ResultStore(), "on_output")
