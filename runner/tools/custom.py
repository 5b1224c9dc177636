"""Custom tools on the controller: where they are found, how they become ToolSpecs, how a call
to one runs in the sandbox (after the guard pipeline every call passes, runner/controller/guards.py).

Places, in precedence order (a later one wins by name):

    system   runner/tools/system_tools/ (shipped with runner; may be empty)
    python   the `runner.tools` entry-point group of runner's Python environment
    user     ~/.config/runner/tools
    policy   the policy's tools.folders, then its tools.plugins
    project  the workspace's tools/, .acai/tools/, .runner/tools/

Nothing here runs a tool: the controller only lists folders and reads packages' metadata
(entry points are found without importing anything). Describing and running happen in
the sandbox (ops custom_describe and custom_run of the agent, runner/agent/custom.py). With
docker the non-workspace folders are bind-mounted read-only under /opt/runner-tools/<place>,
and the project folders are protected (read-only) like any protected directory. The packages
behind entry points (their top-level modules and those of what they require) are bind-mounted
read-only under /opt/runner-tools/python, which is their PYTHONPATH in the sandbox.

Every function here takes the Session (runner/controller/session.py): where a folder is in the sandbox,
and whether it is shipped there, is the backend's Placement's answer; nothing here names a
backend or reaches into the Runner.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from ..untrusted import wspath
from ..backends import ToolFolder
from .schemas.registry import ToolSpec

PROJECT_DIRS = ("tools", ".acai/tools", ".runner/tools")
ENTRY_POINT_GROUP = "runner.tools"
SYSTEM_DIR = Path(__file__).resolve().parent / "system_tools"
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")  # what the agents' APIs accept
_PY_TYPES: dict[str, Any] = {"string": str, "number": float, "integer": int, "boolean": bool, "array": list,
                             "object": dict}


def user_dir() -> Path:
    return Path.home() / ".config" / "runner" / "tools"


@dataclass(frozen=True)
class Place:
    place: str  # system | user | policy | project
    host: Optional[Path]  # None: a folder of the ssh host, not of this machine
    sandbox: str  # the folder as the sandbox sees it
    mount: bool  # ship it: bind-mount it read-only (docker), copy it to the host (ssh)


@dataclass(frozen=True)
class CustomSpec(ToolSpec):
    """A ToolSpec for a custom tool: its declared JSON Schema is what agents see."""

    kind: str = "exe"  # exe | script | plugin | module | lua | python
    path: str = ""  # in the sandbox; for python the entry point's module:attr
    plugin_args: tuple[str, ...] = ()
    pythonpath: tuple[str, ...] = ()  # python: where the sandbox imports it from
    declared: dict = field(default_factory=dict)

    def schema(self) -> dict:
        return dict(self.declared) if self.declared else super().schema()


@dataclass
class Catalog:
    tools: dict[str, CustomSpec] = field(default_factory=dict)
    errors: list[dict] = field(default_factory=list)


# -- places --------------------------------------------------------------------------------------
def shipped_root(session) -> Optional[str]:
    """Where this machine's tool folders appear in the sandbox: docker mounts them read-only
    under /opt/runner-tools; ssh copies them into a folder of the session on the host;
    local uses them where they are (None). The backend's Placement answers."""
    return session.placement.tools_root


def _refused(errors: Optional[list], place: str, path, why: str) -> None:
    if errors is not None:
        errors.append({"place": place, "path": str(path), "kind": "-", "error": why})


LEAVES = "given relative to the workspace, it leaves the workspace: refused"


def _folder(ws: Path, given: Path) -> Optional[Path]:
    """The host directory of a tool folder. One that lies in the workspace (given relative to
    it, or an absolute path there, also once the operator's own links are followed) is reached
    without following any link in the workspace: UnsafePath names the link. None: a relative
    path leaving the workspace ('..'). FileNotFoundError/NotADirectoryError when it is missing."""
    rel = wspath.relative(ws, given)
    if rel is None and not given.is_absolute():
        return None
    if rel is None:
        real = Path(os.path.realpath(given))
        rel = wspath.relative(ws, real)
        if rel is None and wspath.touches(ws, given):
            raise wspath.UnsafePath(f"{given} passes through the workspace and out of it again through a link there")
        if rel is None:
            if not real.is_dir():
                raise FileNotFoundError(str(given))
            return real
    host = wspath.inside(ws, rel)
    if not host.is_dir():
        raise NotADirectoryError(str(given))
    return host


def places(session, errors: Optional[list] = None) -> list[Place]:
    """The folders to scan, in precedence order (only those that exist here; on ssh the project
    folders are the host's, which the sandbox lists itself). A folder given relative to the
    workspace (the project's, a relative policy folder) whose real path leaves the workspace (a
    symlink planted there) is refused, never mounted or copied, and said in `errors`."""
    pol = session.policy
    ws = session.workspace
    placement = session.placement
    out: list[Place] = []
    root = placement.tools_root

    def add(place: str, given: Path, label: str) -> None:
        try:
            host = _folder(ws, given.expanduser())
        except (FileNotFoundError, NotADirectoryError):
            return
        except wspath.UnsafePath as e:
            return _refused(errors, place, ws / given, f"this tool folder: {e}: refused")
        except OSError as e:  # there but unreadable: say so rather than lose its tools silently
            return _refused(errors, place, ws / given, f"this tool folder could not be opened: {e.strerror or e}")
        if host is None:
            return _refused(errors, place, ws / given, f"this tool folder, {LEAVES}")
        view = placement.sandbox_view(host)
        if view is not None:
            out.append(Place(place, host, view, False))
        else:
            out.append(Place(place, host, f"{root}/{label}", True))

    add("system", SYSTEM_DIR, "system")
    add("user", user_dir(), "user")
    for i, folder in enumerate(pol.tools.folders):
        add("policy", Path(folder), f"policy-{i}")
    for rel in PROJECT_DIRS:
        if placement.remote:
            out.append(Place("project", None, placement.in_sandbox(rel), False))
        else:
            add("project", Path(rel), "")
    return out


def _plugin_paths(session, errors: Optional[list] = None) -> list[tuple[dict, Optional[Place]]]:
    """[(plugin entry for the agent, mount or None)]: paths as the sandbox sees them. A bare
    name is a command on the sandbox's PATH (never looked up in the workspace); a relative path
    is the workspace's and must stay in it; an absolute one is this machine's (shipped to the
    sandbox) when it exists here, else the sandbox's own."""
    ws = session.workspace
    placement = session.placement
    root = placement.tools_root
    out = []
    for i, pl in enumerate(session.policy.tools.plugins):
        raw = os.path.expanduser(pl.path)
        entry = {"path": raw, "args": list(pl.args), "place": "policy"}
        if "/" not in raw:
            out.append((entry, None))
            continue
        if not os.path.isabs(raw):
            if placement.remote:  # the host's workspace
                entry["path"] = placement.in_sandbox(raw)
                out.append((entry, None))
                continue
            rel = wspath.relative(ws, raw)
            if rel is None:
                _refused(errors, "policy", ws / raw, f"this plugin, {LEAVES}")
                continue
        elif not os.path.lexists(raw) or root is None:
            out.append((entry, None))
            continue
        else:
            rel = wspath.relative(ws, os.path.realpath(raw))
            if rel is None and wspath.touches(ws, raw):
                _refused(errors, "policy", raw, "this plugin passes through the workspace and out of it again "
                         "through a link there: refused")
                continue
        if rel is not None:
            try:  # in the workspace: never through a link there (missing: the sandbox says so)
                host = wspath.inside(ws, rel)
            except FileNotFoundError:
                host = ws / rel
            except wspath.UnsafePath as e:
                _refused(errors, "policy", ws / raw, f"this plugin: {e}: refused")
                continue
            entry["path"] = placement.sandbox_view(host) or str(host)
            out.append((entry, None))
            continue
        host = Path(os.path.realpath(raw))
        mount = Place("policy", host.parent, f"{root}/plugin-{i}", True)
        entry["path"] = f"{mount.sandbox}/{host.name}"
        out.append((entry, mount))
    return out


# -- Python entry points ----------------------------------------------------------------------
_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _top_levels(dist) -> set[str]:
    """The importable top-level names a distribution installs (from its metadata only)."""
    names = set()
    top = dist.read_text("top_level.txt")
    if top:
        names.update(n.strip() for n in top.splitlines() if n.strip())
    for f in dist.files or ():
        parts = f.parts
        if not parts or parts[0] in ("..", "__pycache__") or parts[0].endswith((".dist-info", ".egg-info", ".pth")):
            continue
        first = parts[0]
        if len(parts) > 1 or first.endswith(".py"):
            names.add(first.split(".")[0])
        elif first.endswith(".so"):
            names.add(first.split(".")[0])
    return {n for n in names if n.isidentifier()}


def _locations(dist, top: str) -> list[Path]:
    """Where the distribution put its top-level module `top`, as absolute paths with no link
    resolved: from its RECORD (nothing is imported and the controller's sys.path is not
    consulted, so a `top.py` in the current directory cannot stand in). An editable install
    records no module files: then the path entries its .pth added are searched, never '' or the
    current directory."""
    found = set()
    for f in dist.files or ():
        parts = f.parts
        if not parts or parts[0] == "..":
            continue
        first = parts[0]
        if (first == top and len(parts) > 1) or (len(parts) == 1 and (
                first == f"{top}.py" or (first.startswith(f"{top}.") and first.endswith(".so")))):
            found.add(first)
    if found:
        return [Path(os.path.abspath(dist.locate_file(n))) for n in sorted(found)]
    import importlib.machinery

    try:
        spec = importlib.machinery.PathFinder.find_spec(top, _path_not_here())
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(os.path.abspath(p)) for p in spec.submodule_search_locations]
    if spec.origin and os.path.isfile(spec.origin):
        return [Path(os.path.abspath(spec.origin))]
    return []


def _path_not_here() -> list[str]:
    """The controller's sys.path without '', '.' and the current directory."""
    import sys

    try:
        here = os.getcwd()
    except OSError:
        here = None
    return [p for p in sys.path if isinstance(p, str) and p not in ("", ".") and os.path.abspath(p) != here]


def _search_path(ws: Path) -> list[str]:
    """The controller's sys.path without what the sandbox could have written: '' and '.', the
    current directory, and every entry in the workspace (as given, or once the operator's links
    are followed). Run as `python -m runner` in the workspace, the workspace is sys.path[0]: a
    dist-info planted there named an entry point, or took the name of a tool's requirement, and
    its RECORD a package that links out of the workspace, which the controller then resolved and
    shipped to the sandbox (a host folder mounted or copied); its files were read here unbounded."""
    out = []
    for p in _path_not_here():
        given = os.path.abspath(p)
        if wspath.relative(ws, given) is None and not wspath.touches(ws, given):
            out.append(p)
    return out


def _norm(name: str | None) -> str:
    return re.sub(r"[-_.]+", "-", name or "").lower()


def _requirements(dist) -> list[str]:
    out = []
    for req in dist.requires or ():
        if "extra ==" in req.replace('"', "").replace("'", ""):
            continue
        m = _REQ_NAME.match(req)
        if m:
            out.append(m.group(1))
    return out


def _dist_key(dist) -> str:
    """A distribution's name as importlib.metadata.entry_points() tells distributions apart: from
    its metadata folder's name (no METADATA read), else from its METADATA."""
    key = getattr(dist, "_normalized_name", None)  # (PathDistribution's, Python 3.10 on)
    return _norm(key if isinstance(key, str) and key else dist.metadata["Name"])


def group_entry_points(search: list[str]) -> list:
    """The `runner.tools` entry points of the distributions on the path entries `search`, the
    first distribution of each name only (as importlib.metadata.entry_points() takes them),
    sorted by name. Of each distribution only entry_points.txt is read, and parsed only when the
    group's name is in it: parsing every distribution's METADATA as an e-mail message cost
    0.3-0.5 s per Runner in a venv of 226 distributions (issue 52); this reads the same files
    the group's own index is made of, in 10 ms."""
    from importlib.metadata import distributions

    eps, names = [], set()
    for dist in distributions(path=search):
        key = _dist_key(dist)
        if key in names:  # the first of a name on the path
            continue
        names.add(key)
        text = dist.read_text("entry_points.txt")
        if text and ENTRY_POINT_GROUP in text:
            eps += [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
    eps.sort(key=lambda ep: ep.name)
    return eps


def entry_point_tools(session, errors: Optional[list] = None) -> tuple[list[dict], list]:
    """([{name, ref, pythonpath, place, order}], [Place to mount]) for the `runner.tools` group.
    Only metadata is read here; describing and running happen in the sandbox, which imports the
    tool's package and what it requires from read-only mounts (docker) or from where they are
    installed (local). A package that lives in the workspace is refused: the agent could
    rewrite it."""
    from importlib.metadata import distributions

    if not session.policy.tools.entry_points:
        return [], []
    ws = session.workspace
    search = _search_path(ws)  # never the workspace's metadata
    eps = group_entry_points(search)
    if not eps:
        return [], []
    root = shipped_root(session)
    prefix = f"{root}/python" if root else None
    stdlib = set(getattr(__import__("sys"), "stdlib_module_names", ()))
    tools, mounts_by_target = [], {}
    for ep in eps:
        if ep.dist is None:
            _refused(errors, "python", ep.value, f"entry point {ep.name}: no installed distribution holds it")
            continue
        modules: list[tuple] = [(ep.dist, ep.module.split(".")[0])]  # (distribution, top-level name)
        seen, queue = set(), [ep.dist]
        while queue:  # the distribution and, transitively, what it requires
            dist = queue.pop()
            key = _norm(dist.metadata["Name"])
            if key in seen or key == "runner":
                continue
            seen.add(key)
            modules += [(dist, top) for top in sorted(_top_levels(dist) - stdlib)]
            for req in _requirements(dist):
                first = next(iter(distributions(name=req, path=search)), None)
                if first is not None:
                    queue.append(first)
        given = list(dict.fromkeys(loc for dist, top in modules for loc in _locations(dist, top)))
        # in the workspace, or reached through it (a link there, never resolved here)
        inside = [loc for loc in given if wspath.relative(ws, loc) is not None or wspath.touches(ws, loc)]
        if inside:
            _refused(errors, "python", f"{ep.module}:{ep.attr}", f"entry point {ep.name}: its package lives in the "
                     f"workspace ({inside[0]}), where the agent could rewrite it: refused")
            continue
        locs = list(dict.fromkeys(loc.resolve() for loc in given))  # the operator's own links
        paths: list[str] = []
        for loc in locs:
            if prefix:
                target = f"{prefix}/{loc.name}"
                mounts_by_target.setdefault(target, Place("python", loc, target, True))
                if prefix not in paths:
                    paths.append(prefix)
            elif str(loc.parent) not in paths:
                paths.append(str(loc.parent))
        tools.append({"name": ep.name, "ref": f"{ep.module}:{ep.attr}" if ep.attr else ep.module,
                      "pythonpath": paths, "place": "python"})
    return tools, list(mounts_by_target.values())


def shipments(session) -> list[ToolFolder]:
    """This machine's folders the sandbox needs, where the backend ships them (mounted
    read-only, or copied): tool folders outside the workspace, plugins' folders, the packages
    behind Python entry points."""
    return [ToolFolder(p.host, p.sandbox) for p in
            [p for p in places(session) if p.mount] + [m for _, m in _plugin_paths(session) if m is not None]
            + entry_point_tools(session)[1]]


FOLDER_SCAN_MAX = 10_000  # entries of one tool folder the controller looks at


def _open_folder(ws: Path, folder: Path) -> wspath.DirFd:
    """A tool folder opened for reading its entries: one in the workspace without following any
    link there, another (the operator's) as it is."""
    rel = wspath.relative(ws, folder)
    if rel is not None:
        return wspath.open_dir(ws, rel)
    return wspath.DirFd(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), str(folder))


def _holds_tools(ws: Path, folder: Path) -> bool:
    """Whether a folder holds what runner may take for a tool, judged on the controller without
    running or following anything: a link counts (the sandbox follows it in its own view), a
    regular file by the sandbox's rules applied to its name, x bit and first bytes (a bounded
    read), anything else (FIFO, socket, device, directory) does not. What cannot be read here
    counts (the sandbox looks, and says why it could not), so no tool vanishes without a word;
    a link on the way to the folder (UnsafePath, said by places()) does not."""
    import stat

    from ..agent.custom import HEAD, classify_head

    try:
        with _open_folder(ws, folder) as d:
            for name, st in d.entries(FOLDER_SCAN_MAX):
                if name.startswith(".") or name.endswith(".md"):
                    continue
                if stat.S_ISLNK(st.st_mode):
                    return True
                if stat.S_ISREG(st.st_mode):
                    head = d.read_head(name, HEAD)
                    if head is None or classify_head(name, head, bool(st.st_mode & 0o111)):
                        return True
    except ValueError:  # UnsafePath among them
        return False
    except OSError:
        return True
    return False


def _count_entries(ws: Path, folder: Path) -> int:
    try:
        with _open_folder(ws, folder) as d:
            return len(d.entries(FOLDER_SCAN_MAX))
    except (OSError, ValueError):
        return 0


def protected_dirs(session) -> list[str]:
    """The tool folders in the workspace, workspace-relative, protected like .git/hooks so an
    agent cannot rewrite a tool that is later called (perhaps approved) under the same name:
    `.acai/tools` and `.runner/tools` whenever they exist, `tools/` when it holds a tool (many
    projects keep their own code in a folder of that name) or when custom tools run but bash does
    not (a tool the writing tools made there would be a command of the agent's after all),
    and any system, user or policy folder or plugin that happens to live in the workspace (a user
    or policy folder there also while it is missing)."""
    policy, workspace, placement = session.policy, session.workspace, session.placement
    if not policy.tools.custom:
        return []
    if placement.remote:  # the project is on the host: protect all three by path
        return list(PROJECT_DIRS)
    ws = workspace
    out = []
    tools_only = not policy.features.bash and policy.custom_tools_gate() is None  # commands only as tools
    for rel in PROJECT_DIRS:
        # .acai/tools and .runner/tools always: a missing one is refused to the writing tools and
        # made in the sandbox only by bash. One reached through a link is never loaded (places).
        try:
            host = wspath.inside(ws, rel, kind="dir")
        except FileNotFoundError:
            host = None
        except (OSError, ValueError):
            continue
        if rel != "tools" or tools_only or (host is not None and _holds_tools(ws, host)):
            out.append(rel)
    for given in (user_dir(), *(Path(f).expanduser() for f in policy.tools.folders)):
        # one in the workspace like .runner/tools: also while it is missing (the writing tools
        # must not make it and a tool in it); one reached through a link is never loaded (places)
        rel = wspath.relative(ws, given)
        if rel is None and given.is_absolute():
            rel = wspath.relative(ws, os.path.realpath(given))
        if not rel or rel in out:
            continue
        try:
            wspath.inside(ws, rel, kind="dir")
        except FileNotFoundError:
            pass
        except (OSError, ValueError):
            continue
        out.append(rel)
    hosts = [p.host for p in places(session) if p.place != "project" and p.host is not None]
    for entry, mount in _plugin_paths(session):
        raw = entry["path"]
        if mount is None and os.path.isabs(raw):
            host = placement.host_path(raw)  # a plugin in the workspace, as this machine sees it
            if host != raw or os.path.lexists(raw):  # one where it is counts when it exists
                hosts.append(Path(host))
    for host in hosts:
        rel = wspath.relative(ws, host)
        if rel and rel not in out:
            out.append(rel)
    return out


# -- specs ---------------------------------------------------------------------------------------
def _field_type(prop: dict):
    t = prop.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    if isinstance(prop.get("enum"), list) and prop["enum"] and all(isinstance(v, (str, int, float, bool))
                                                                       for v in prop["enum"]):
        return Literal[tuple(prop["enum"])]
    return _PY_TYPES.get(t, Any)


def model_for(name: str, schema: dict):
    """A pydantic model for a JSON Schema object (its top-level properties), extra keys refused,
    so a validation error names the argument."""
    from pydantic import ConfigDict, Field, create_model

    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    fields: dict[str, Any] = {}
    for i, (pname, prop) in enumerate(props.items()):
        prop = prop if isinstance(prop, dict) else {}
        typ = _field_type(prop)
        desc = prop.get("description")
        if pname in required and "default" not in prop:
            fields[f"p{i}"] = (typ, Field(..., alias=pname, description=desc))
        else:
            fields[f"p{i}"] = (Optional[typ], Field(prop.get("default"), alias=pname, description=desc))
    safe = "".join(c if c.isalnum() else "_" for c in name)
    return create_model(f"Custom_{safe}", __config__=ConfigDict(extra="forbid", populate_by_name=False), **fields)


def to_spec(t: dict) -> CustomSpec:
    schema = t.get("parameters") if isinstance(t.get("parameters"), dict) else {"type": "object", "properties": {}}
    schema = {"type": "object", **schema}
    return CustomSpec(name=t["name"], description=t.get("description") or "", model=model_for(t["name"], schema),
                      guidance=t.get("guidance") or "", needs_approval=bool(t.get("needs_approval")),
                      source=t.get("place") or "custom", tags=("custom", t.get("kind") or ""), kind=t.get("kind") or "",
                      path=t.get("path") or "", plugin_args=tuple(t.get("plugin_args") or ()),
                      pythonpath=tuple(t.get("pythonpath") or ()), declared=schema)


# -- discovery -----------------------------------------------------------------------------------
def _has_candidates(ws: Path, ps: list[Place]) -> bool:
    return any(p.host is None or _holds_tools(ws, p.host) for p in ps)


def discover(session) -> Catalog:
    """Describe every custom tool, in the sandbox; resolve precedence and shadowing. The tool
    folders are looked at afresh (a refresh finds what was added since)."""
    from ..controller.sandbox import NoSandbox, SandboxDied
    from .schemas import registry
    from ..agent.custom import DESCRIPTION_MAX, GUIDANCE_MAX  # the agent cuts there too; a forged answer is cut here

    cat = Catalog()
    pol = session.policy
    if not pol.tools.custom:
        return cat
    session.forget_tool_folders()
    ps = places(session, cat.errors)
    plugins = [e for e, _ in _plugin_paths(session, cat.errors)]
    python = entry_point_tools(session, cat.errors)[0]
    for ep in python:  # after system, before user
        ep["order"] = sum(p.place == "system" for p in ps) - 0.5
    if not plugins and not python and not _has_candidates(session.workspace, ps):
        return cat  # nothing to describe: no sandbox needed
    args = {"places": [{"place": p.place, "dir": p.sandbox} for p in ps], "plugins": plugins, "python": python,
            "timeout": pol.tools.describe_timeout}
    n_jobs = sum(_count_entries(session.workspace, p.host) if p.host else 20 for p in ps) + len(plugins) + len(python)
    shipped = session.ship_tools()
    if shipped is not None:
        cat.errors.append({"place": "-", "path": "-", "error": shipped})
        return cat
    try:
        msg = session.run(f"custom_describe-{os.urandom(3).hex()}", "custom_describe", args,
                          pol.tools.describe_timeout * (n_jobs + 1))
    except NoSandbox as e:
        msg = {"is_error": True, "content": str(e)}
    except SandboxDied as e:
        msg = {"is_error": True, "content": f"the sandbox died: {e}"}
    if msg.get("is_error") or not isinstance(msg.get("content"), dict):
        cat.errors.append({"place": "-", "path": "-", "error": f"describing custom tools failed: {msg.get('content')}"})
        return cat
    found = msg["content"]
    cat.errors += found.get("errors") or []
    for t in sorted(found.get("tools") or [], key=lambda t: t.get("order", 0)):
        name = t.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            cat.errors.append({"place": t.get("place"), "path": t.get("path"), "kind": t.get("kind"),
                               "error": f"bad tool name {str(name)[:80]!r}: use letters, digits, _ and - (at most 64, "
                                        "not starting with a digit)"})
            continue
        t["description"] = str(t.get("description") or "")[:DESCRIPTION_MAX]
        t["guidance"] = str(t.get("guidance") or "")[:GUIDANCE_MAX]
        if name in registry.SPECS and not pol.tools.allow_shadowing:
            cat.errors.append({"place": t.get("place"), "path": t.get("path"), "kind": t.get("kind"),
                               "error": f"custom tool {name} has the name of a built-in tool and was refused: rename "
                                        "it, or set tools.allow_shadowing: true in the policy"})
            continue
        try:
            spec = to_spec(t)
        except Exception as e:
            cat.errors.append({"place": t.get("place"), "path": t.get("path"), "kind": t.get("kind"),
                               "error": f"bad parameters schema: {e}"})
            continue
        prev = cat.tools.get(name)
        if prev is not None:
            cat.errors.append({"place": prev.source, "path": prev.path, "kind": prev.kind,
                               "error": f"{name} is overridden by {t.get('place')} {t.get('path')}", "overridden": True})
        cat.tools[name] = spec
    return cat


def changes(old: Catalog | None, new: Catalog) -> dict:
    before = old.tools if old is not None else {}
    after = new.tools

    def sig(s: CustomSpec):
        return (s.description, s.guidance, s.kind, s.path, s.source, s.needs_approval, repr(s.declared))

    return {"added": sorted(set(after) - set(before)), "removed": sorted(set(before) - set(after)),
            "changed": sorted(n for n in set(after) & set(before) if sig(after[n]) != sig(before[n]))}


def report(ch: dict, cat: Catalog) -> str:
    lines = [f"custom tools: {', '.join(sorted(cat.tools)) or '(none)'}"]
    for key in ("added", "removed", "changed"):
        if ch[key]:
            lines.append(f"{key}: {', '.join(ch[key])}")
    if not any(ch.values()):
        lines.append("no change")
    for e in cat.errors:
        if not e.get("overridden"):
            lines.append(f"skipped {e.get('path')} ({e.get('place')}): {e.get('error')}")
    return "\n".join(lines)


# -- calls ---------------------------------------------------------------------------------------
def operation(spec: CustomSpec, args: dict, policy) -> dict:
    """The arguments of the agent's custom_run op for one call. `args` have passed the guard
    pipeline (the same steps as a built-in's: runner/controller/guards.py); the Runner runs the op."""
    tool = spec.name
    op = {"kind": spec.kind, "path": spec.path, "name": tool, "timeout": policy.limits.timeout_for(tool)}
    if spec.kind == "exe":
        op["args"] = args.get("args") or ""
    else:
        op["params"] = {k: v for k, v in args.items() if v is not None}
    if spec.kind == "plugin":
        op["plugin_args"] = list(spec.plugin_args)
    if spec.kind == "python":
        op["pythonpath"] = list(spec.pythonpath)
    return op
