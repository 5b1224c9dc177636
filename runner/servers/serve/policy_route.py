"""`PATCH /v1/sessions/{id}/policy`: a live session's network policy changed by its tenant,
within what the tenant's grant allows (runner/controller/live_policy.py does the change).

Body: {"network": {"allow": [...]}, "secrets": {NAME: {"hosts": [...]}}}. The grant is the
policy the session started with, which the operator granted: a tenant may narrow its allowlist
and widen it again up to that policy's entries, and move a brokered secret among the hosts that
policy lists for it, never past them; `network.tls_ca_file` names files of the operator's
machine and is not the tenant's to change. 200 and the network now in force; 403 past the
grant; 422 for a change the policy does not accept. Audited by the session's Runner. A session
whose Runner is made again elsewhere (another instance, a restart) starts from its granted
policy again.
"""
from typing import Annotated, Any

from fastapi import Depends, Request

# (no `from __future__ import annotations`: the route's Annotated[..., Depends(tenant)] names a
# function of create_app's, which FastAPI could not find from a string)


def register(app, state, *, tenant, live_of, in_turn) -> None:
    from ...controller.live_policy import within_grant
    from ...errors import RunnerError
    from ...policy.problems import PolicyError
    from .apidoc import SESSION, PolicyChange, PolicyNow, doc
    from .app import Problem

    @app.patch("/v1/sessions/{sid}/policy", **doc(PolicyChange, PolicyNow, *SESSION, 403, 429))
    async def patch_policy(sid: str, request: Request, grant: Annotated[Any, Depends(tenant)]):
        """Change the network policy of a live session (its next connections), within the grant."""
        try:
            changes = await request.json()
        except ValueError as e:
            raise Problem(422, f"the body is not valid JSON: {e}") from None
        with state.gate.slot(grant):
            live = await live_of(grant, sid)
            runner = live.runner
            started = getattr(runner, "started_policy", None) or runner.policy
            why = within_grant(started, changes)
            if why:
                raise Problem(403, why)
            try:
                return await in_turn(live, runner.update_policy, changes)
            except (PolicyError, RunnerError) as e:
                raise Problem(422, str(e)) from None
