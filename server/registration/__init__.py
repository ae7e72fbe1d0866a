"""The steps `server/app.py` `build_server` composes: each registers one part of the server.

- `registry.py`: `Registry`, what every step shares (the server being built, how it
  serves, what the policies offer), and the one tool preamble, `Registry.call`: the
  caller's session by the session rule, Airlock's errors as tool errors, progress.
- `lifespan.py`: what a serving Airlock is made of, started and taken down with the server.
- `routes.py`: the plain HTTP routes (/livez, /healthz, /readyz, /metrics, /approvals).
- one module per tool or group of tools: `code.py` (run_code), `files.py`
  (fetch_artifact, list_workspace, read_workspace_file), `capabilities.py`
  (request_capability and its elicitation resolver, revoke_capability), `hatch.py`
  (copy_in, get_patch), `forks.py` (fork_session, restore_workspace), `session.py`
  (end_session).
- `resources.py`: the resources (artifacts, workspace files, patches).

To add a tool: a module here with `register(registry)`, whose tool function takes its
arguments, `session_id: SessionArg` (`Annotated[str | None, registry.session_field]`) and
`ctx: AirlockContext`, and hands over to `tools` inside
`async with registry.call(ctx, session_id) as call:`; then add the module to `TOOLS` in
`server/app.py`. Handlers live in `tools`, never here.

The tool and resource modules do not use `from __future__ import annotations`: the SDK
reads their signatures at registration, and their argument types are built per server
(the session rule's sentence, the policies' limits).
"""
