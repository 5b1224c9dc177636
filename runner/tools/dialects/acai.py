"""acai (seed 001): its dynamic tools, scripts in .acai/tools answering TOOL_ACTION=describe and
execute (runner's custom tools of kind script), registered with a `dynamic-` prefix: a tool named
my-tool is called as dynamic-my-tool. The seed names no built-in tools, so runner's own are
offered under their own names."""
from __future__ import annotations

from .base import Dialect

DIALECT = Dialect(
    name="acai",
    seed="001_9fe2d12037aa2cd1.txt",
    tools=(),
    native_passthrough=True,
    custom_prefix={"script": "dynamic-"},
    deviations=(
        "dynamic tools time out after the policy's limits.timeout (default 120 s), not acai's 30 s: set "
        "limits.tool_timeouts per tool",
        "tools.dynamicTools.maxTools is not read: every dynamic tool found is loaded",
        "needsApproval goes through the policy's approval rule (deny, allow or ask)",
    ),
)
