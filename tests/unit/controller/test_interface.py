"""Runner, RemoteRunner, AsyncRunner and AsyncRemoteRunner are one interface
(runner/controller/interface.py): the same public methods, with the same parameters and the same
return types, sync or async. The integration tests (tests/integration/api, serve/test_remote_api.py)
check the values they return on the real engine and a real server."""
from __future__ import annotations

import inspect

import pytest

from runner import AsyncRemoteRunner, AsyncRunner, AsyncToolRunner, RemoteRunner, Runner, ToolRunner
from runner.controller.interface import METHODS

SYNC = (Runner, RemoteRunner)
ASYNC = (AsyncRunner, AsyncRemoteRunner)


def params(fn) -> list[tuple]:
    """(name, kind, default) of each parameter but self."""
    return [(p.name, p.kind, p.default) for p in list(inspect.signature(fn).parameters.values())[1:]]


def returns(cls, name: str) -> str:
    ann = inspect.signature(getattr(cls, name)).return_annotation
    ann = ann.strip("\"'") if isinstance(ann, str) else ann
    own = (cls.__name__, "ToolRunner", "AsyncToolRunner")
    if name == "start":  # each returns itself
        return "self" if ann in own else ann
    if name == "fork":  # each returns runners of its own kind
        return "list[self]" if str(ann).replace('"', "").replace("'", "") in {f"list[{c}]" for c in own} else ann
    return ann


def test_the_interface_names_every_method_the_issue_asks_for():
    assert set(METHODS) >= {"call", "tools", "put_file", "get_file", "list_files", "close", "cancel", "start"}
    assert set(ToolRunner.__abstractmethods__) == set(METHODS)


@pytest.mark.parametrize("cls", SYNC, ids=lambda c: c.__name__)
def test_each_sync_runner_is_the_interface(cls):
    assert issubclass(cls, ToolRunner)
    assert not cls.__abstractmethods__  # every method written
    for name in METHODS:
        mine, theirs = params(getattr(cls, name)), params(getattr(ToolRunner, name))
        assert mine[:len(theirs)] == theirs, name
        assert all(p[2] is not inspect.Parameter.empty or p[1] is inspect.Parameter.VAR_KEYWORD
                   for p in mine[len(theirs):]), name  # extras are optional
        assert returns(cls, name) == returns(ToolRunner, name), name
        assert not inspect.iscoroutinefunction(getattr(cls, name))
    assert callable(cls.__enter__) and callable(cls.__exit__)


@pytest.mark.parametrize("cls", ASYNC, ids=lambda c: c.__name__)
def test_each_async_runner_is_the_interface_with_coroutines(cls):
    assert issubclass(cls, AsyncToolRunner)
    for name in METHODS:
        fn = getattr(cls, name)
        assert inspect.iscoroutinefunction(fn), name
        assert params(fn) == params(getattr(ToolRunner, name)), name
        assert returns(cls, name) == returns(ToolRunner, name), name
    assert inspect.iscoroutinefunction(cls.__aenter__) and inspect.iscoroutinefunction(cls.__aexit__)
    assert isinstance(inspect.getattr_static(cls, "session_id"), property)
    assert callable(cls.stream)


def test_the_sync_and_async_forms_wrap_the_matching_sync_runner():
    assert RemoteRunner("http://127.0.0.1:9", "k").session_id is None
    assert RemoteRunner("http://127.0.0.1:9", "k", session="s1").session_id == "s1"
    a = AsyncRemoteRunner("http://127.0.0.1:9", "k", session="s2")
    assert isinstance(a.sync, RemoteRunner) and a.session_id == "s2"


def test_a_remote_runner_refuses_what_is_not_an_http_url():
    from runner.errors import RunnerError

    with pytest.raises(RunnerError, match="http"):
        RemoteRunner("ftp://example.invalid/", "k")
