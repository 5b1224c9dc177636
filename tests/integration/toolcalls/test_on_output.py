"""Runner.call(..., on_output=): a library user gets a streaming tool's output as it is produced,
before the call returns, redacted (a secret split across pieces included), on the calling
thread; a callback that raises does not break the call. The full Runner on `local` and `docker`.

Ordering is proven by the sandbox waiting on what the callback does (it creates a file in the
workspace), never by timing: the command goes on only once the controller has handed the
first line to the callback."""
from __future__ import annotations

import threading

import pytest

from runner import Runner

SECRET = "tok-5b1d7e93c0a24f68e2d1"
WAIT_GO = 'for i in $(seq 600); do [ -e {f} ] && break; sleep 0.1; done; [ -e {f} ] && echo {f}-seen || echo {f}-missing'


@pytest.fixture(params=["local", "docker"])
def executor(request):
    if request.param != "local":
        request.getfixturevalue("no_leaks")
    return request.param


def test_a_library_user_sees_each_line_before_the_call_returns(runner, workspace):
    events: list[tuple[str, str]] = []
    threads = set()

    def on_output(text: str) -> None:
        threads.add(threading.get_ident())
        events.append(("output", text))
        if "a\n" in "".join(t for _, t in events):
            (workspace / "go").touch()  # the command waits for this before it prints b

    res = runner.call("bash", {"command": "echo a; " + WAIT_GO.format(f="go") + "; echo b"}, on_output=on_output)
    events.append(("result", res.text))
    assert not res.is_error, res.text
    streamed = "".join(t for n, t in events if n == "output")
    assert streamed == "a\ngo-seen\nb\n" and res.text == streamed  # the command saw the callback's file
    assert events[-1][0] == "result" and events[0] == ("output", "a\n")
    assert threads == {threading.get_ident()}  # on the thread that called call


def test_a_secret_split_across_pieces_reaches_on_output_redacted(executor, workspace, tmp_path, monkeypatch):
    """The secret's two halves are printed apart: the second only once the controller has read
    the first as a piece of its own (the store's sink is watched for it), so the split is real."""
    policy = tmp_path / "secretive.yaml"
    policy.write_text("extends: default\nname: secretive\nsecrets:\n  STREAM_TOKEN: {from_env: RUNNER_TEST_ON_OUTPUT_TOKEN}\n")
    monkeypatch.setenv("RUNNER_TEST_ON_OUTPUT_TOKEN", SECRET)
    raw: list[str] = []
    got: list[str] = []
    with Runner(executor=executor, workspace=workspace, policy=str(policy), pool_size=0) as r:
        made = r.store.sink

        def watched(call_id, caps, on_output=None):
            sink = made(call_id, caps, on_output)
            write = sink.write

            def spy(text: str) -> None:  # what came from the sandbox, before any redaction
                raw.append(text)
                if "".join(raw).endswith(SECRET[:11]):
                    (workspace / "half").touch()
                write(text)

            sink.write = spy
            return sink

        r.store.sink = watched
        command = ('echo "one: $STREAM_TOKEN"; printf "two: %s" "${STREAM_TOKEN:0:11}"; '
                   + "{ " + WAIT_GO.format(f="half") + '; } >/dev/null; printf "%s\\n" "${STREAM_TOKEN:11}"; echo done')
        res = r.call("bash", {"command": command}, on_output=got.append)
    assert not res.is_error, res.text
    assert (workspace / "half").exists() and any(p.endswith(SECRET[:11]) for p in raw)  # it did come in two
    streamed = "".join(got)
    assert SECRET not in streamed and SECRET[:11] not in streamed and SECRET[11:] not in streamed, streamed
    assert streamed == "one: [REDACTED:secret]\ntwo: [REDACTED:secret]\ndone\n", streamed
    assert SECRET not in res.text and res.text == streamed


def test_a_callback_that_raises_is_dropped_and_the_call_goes_on(runner):
    seen: list[str] = []

    def on_output(text: str) -> None:
        seen.append(text)
        raise ValueError("the consumer broke")

    res = runner.call("bash", {"command": "echo a; echo b >&2; exit 3"}, on_output=on_output)
    assert res.is_error and res.meta["exit_code"] == 3  # the tool's own answer, whole
    assert res.text.startswith("a\nb\n")
    assert len(seen) == 1 and res.meta["on_output_error"] == "ValueError: the consumer broke"
    again = runner.call("bash", {"command": "echo next"}, on_output=seen.append)  # a new call, a new callback
    assert again.text == "next\n" and seen[-1] == "next\n" and "on_output_error" not in again.meta


def test_only_a_streaming_tool_gives_on_output_anything(runner, workspace):
    (workspace / "big.txt").write_text("line\n" * 20_000)
    seen: list[str] = []
    res = runner.call("read", {"path": "big.txt"}, on_output=seen.append)
    assert not res.is_error and "line" in res.text and seen == []
    res = runner.call("exec", {"command": "printf 'x\\ny\\n'"}, on_output=seen.append)
    assert "".join(seen) == "x\ny\n" == res.text


def test_a_dialects_tool_streams_as_the_native_tool_it_runs(executor, workspace):
    """Forgekeeper's run_bash is bash: its output reaches on_output as bash's does."""
    seen: list[str] = []
    with Runner(executor=executor, workspace=workspace, preset="all", dialect="forgekeeper", pool_size=0) as r:
        res = r.call("run_bash", {"script": "echo one; echo two"}, on_output=seen.append)
    assert not res.is_error and "".join(seen) == "one\ntwo\n", (seen, res.text)
