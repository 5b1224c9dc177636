"""One allowlist grammar (executors/allowlist.py) behind the policy, the in-sandbox agent and the
egress proxy: every entry of the table gets the same answer from all three, and the same host
and port are allowed or refused by the agent's check and the proxy's decision alike.
Engine-free: the agent's module is the one its bundle carries, the proxy's the one its container runs."""
from __future__ import annotations

import ipaddress
import types

import pytest

from executors import allowlist
from executors.docker import egress_proxy
from runner.controller import bundle
from runner.policy import Policy

# entry, canonical spelling (None: refused), what the refusal says
TABLE = [
    ("api.example.org:443", "api.example.org:443", None),
    ("API.Example.ORG.:443", "api.example.org:443", None),
    ("api.example.org", "api.example.org", None),  # no port: 80 and 443
    ("*.example.org:443", "*.example.org:443", None),
    ("*.example.org", "*.example.org", None),
    ("93.184.216.34:443", "93.184.216.34:443", None),
    ("93.184.216.34", "93.184.216.34", None),
    ("10.0.0.0/24:443", "10.0.0.0/24:443", None),
    ("10.0.0.7/24", "10.0.0.0/24", None),  # host bits dropped
    ("[2001:db8::1]:443", "[2001:db8::1]:443", None),
    ("[2001:db8::/32]:8443", "[2001:db8::/32]:8443", None),
    ("2001:db8::1", "2001:db8::1", None),  # bare, no port
    ("[2001:db8::1]", "2001:db8::1", None),
    ("[::ffff:10.0.0.1]:80", "10.0.0.1:80", None),  # a mapped address is the IPv4 one
    ("localhost:8000", "localhost:8000", None),
    ("*.org:443", None, "at least two labels"),
    ("*:443", None, "would allow every host"),
    ("a.*.example.org:443", None, "only as the whole first label"),
    ("*example.org:443", None, "only as the whole first label"),
    ("api.example.org:0", None, "port must be a number from 1 to 65535"),
    ("api.example.org:65536", None, "port must be a number from 1 to 65535"),
    ("api.example.org:https", None, "port must be a number"),
    (":443", None, "names no host"),
    ("", None, "empty"),
    ("10.0.0.0/33:443", None, "not an IP network"),
    ("[10.0.0.1]:443", None, "brackets are for IPv6"),
    ("[example.org]:443", None, "not an IPv6 address"),
    ("[2001:db8::1:443", None, "without its ']'"),
    ("[2001:db8::1]443", None, "only ':PORT' may follow"),
    ("1.2.3:443", None, "neither an IP address nor a host name"),
    ("bad_name.example.org:443", None, "not a host name"),
    ("-bad.example.org:443", None, "not a host name"),
    ("a b.example.org:443", None, "not a host name"),
    ("user@example.org:443", None, "not a host name"),
    ("x" * 64 + ".example.org:443", None, "not a host name"),
]


def agent_allowlist() -> types.ModuleType:
    """The grammar module as the in-sandbox agent imports it: from its bundle."""
    is_pkg, src = bundle.modules()[f"{bundle.PACKAGE}.allowlist"]
    mod = types.ModuleType("agent_allowlist")
    exec(compile(src, "<agent allowlist>", "exec"), mod.__dict__)
    return mod


def proxy_namespace() -> dict:
    """The egress proxy as its container runs it: `python3 -I -c SOURCE`, no runner, no executors."""
    from executors.docker.egress import _proxy_source

    ns = {"__name__": "egress_proxy_under_test"}  # not __main__: the proxy is defined, not started
    exec(compile(_proxy_source(), "<proxy>", "exec"), ns)
    return ns["proxy"]


def policy_says(entry):
    try:
        return Policy.model_validate({"network": {"mode": "allowlist", "allow": [entry]}}).network.allow[0], None
    except ValueError as e:  # pydantic's ValidationError
        return None, str(e)


@pytest.mark.parametrize("entry,canonical,why", TABLE, ids=[repr(t[0]) for t in TABLE])
def test_the_three_parsers_agree(entry, canonical, why):
    agent = agent_allowlist()
    proxy = proxy_namespace()
    stored, refused = policy_says(entry)
    assert stored == canonical, refused
    if canonical is None:
        assert why in refused
        with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            agent.parse([entry])
        with pytest.raises(ValueError):
            proxy["parse_allow"]([entry])
        with pytest.raises(ValueError):
            egress_proxy.parse_allow([entry])
    else:
        assert str(agent.parse([entry])[0]) == canonical
        assert str(proxy["parse_allow"]([entry])[0]) == canonical
        assert allowlist.canonical(canonical) == canonical  # the stored spelling reads back the same


# (entries, host, port, allowed)
MATCHES = [
    (["*.example.org:443"], "api.example.org", 443, True),
    (["*.example.org:443"], "a.b.example.org", 443, True),
    (["*.example.org:443"], "API.Example.Org.", 443, True),
    (["*.example.org:443"], "example.org", 443, False),  # not the apex
    (["*.example.org:443"], "api.example.org", 80, False),
    (["*.example.org:443"], "evilexample.org", 443, False),
    (["*.example.org:443"], "example.org.evil.net", 443, False),
    (["*.example.org"], "api.example.org", 80, True),
    (["api.example.org"], "api.example.org", 8080, False),
    (["10.0.0.0/24:443"], "10.0.0.9", 443, True),
    (["10.0.0.0/24:443"], "10.0.1.9", 443, False),
    (["*.0.0.10:443"], "1.0.0.10", 443, False),  # refused as an entry anyway (last label all digits)
    (["[2001:db8::/32]:443"], "2001:db8::5", 443, True),
    (["93.184.216.34:443"], "93.184.216.34", 443, True),
    (["example.org:443"], "93.184.216.34", 443, False),  # a name entry never covers an address
]


@pytest.mark.parametrize("entries,host,port,allowed", MATCHES)
def test_agent_and_proxy_allow_the_same(entries, host, port, allowed):
    from runner.agent.context import ToolError

    try:
        rules = allowlist.parse(entries)
    except ValueError:
        rules = None
    if rules is None:
        assert not allowed
        return
    agent = agent_allowlist()
    assert agent.allowed(agent.parse(entries), host, port) is allowed
    proxy = proxy_namespace()
    public = [ipaddress.ip_address("93.184.216.34")]
    try:
        proxy["decide"](proxy["parse_allow"](entries), host, port, lambda name, p: public)
        proxy_allows = True
    except proxy["Refused"]:
        proxy_allows = False
    assert proxy_allows is allowed
    # and the agent's http_fetch check says the same before any socket opens
    from runner.agent import net

    ctx = types.SimpleNamespace(net_mode="allowlist", net_allow=entries, proxy="http://proxy:3128")
    url_host = f"[{host}]" if ":" in host else host
    try:
        net.check_url(ctx, f"http://{url_host}:{port}/")
        agent_allows = True
    except ToolError:
        agent_allows = False
    assert agent_allows is allowed


def test_policy_check_accepts_exactly_what_a_run_accepts(tmp_path):
    """`runner policy check` on a file with a wildcard entry: ok (and the run accepts it: above)."""
    from runner.policy import check

    f = tmp_path / "p.yaml"
    f.write_text("network:\n  mode: allowlist\n  allow: ['*.example.org:443', '10.0.0.0/24:443', 'api.example.org']\n")
    assert check(str(f)) == []
    f.write_text("network:\n  mode: allowlist\n  allow: ['*.org:443']\n")
    (msg,) = check(str(f))
    assert "p.yaml:3: network.allow[0]: '*.org:443': a wildcard needs at least two labels" in msg
