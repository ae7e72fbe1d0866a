"""The resources: a run's artifacts, a session's workspace files as they are now, and the
patches get_patch kept, each readable only by its tenant ("not found" otherwise)."""

# No `from __future__ import annotations`: the SDK reads these signatures (`__init__`).

from airlock import tools

from .registry import AirlockContext, Registry


def register(registry: Registry) -> None:
    mcp = registry.mcp

    @mcp.resource(
        "airlock://patches/{patch_id}",
        name="patch",
        title="A patch from get_patch",
        description="The whole patch (git format), inside <untrusted-output>.",
    )
    async def patch(
        patch_id: str,
        ctx: AirlockContext = None,  # type: ignore[assignment]  # injected by the SDK
    ) -> str:
        with registry.resource_call(ctx) as (services, tenant):
            return await tools.read_patch_resource(services, tenant, patch_id)

    @mcp.resource(
        "airlock://runs/{run_id}/artifacts/{+path}",
        name="artifact",
        title="A file a run produced",
        description="The content of an artifact: text inside <untrusted-output>, or bytes.",
    )
    async def artifact(
        run_id: str,
        path: str,
        ctx: AirlockContext = None,  # type: ignore[assignment]  # injected by the SDK
    ) -> str | bytes:
        with registry.resource_call(ctx) as (services, tenant):
            return await tools.read_artifact_resource(services, tenant, run_id, path)

    @mcp.resource(
        "airlock://sessions/{session_id}/workspace/{+path}",
        name="workspace file",
        title="A file of a session's workspace, as it is now",
        description="The content of a workspace file: text inside <untrusted-output>, or bytes.",
    )
    async def workspace_file(
        session_id: str,
        path: str,
        ctx: AirlockContext = None,  # type: ignore[assignment]  # injected by the SDK
    ) -> str | bytes:
        with registry.resource_call(ctx) as (services, tenant):
            return await tools.read_workspace_resource(services, tenant, session_id, path)
