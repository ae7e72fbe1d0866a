"""The MCP Tasks extension (`io.modelcontextprotocol/tasks`, the 2026-07-28 version), the
server side: the SDK (mcp 2.3) carries extensions but not this one, so it lives here.

A `tools/call` of run_code, get_patch, copy_in or browse from a 2026-07-28 request whose
client capabilities declare the extension runs as a job (`jobs.TaskJobs`); if it has not
finished within `[tasks] answer_within_s`, its task is written to the store and the call
answers `CreateTaskResult`; the job runs on and ends the task with the call's outcome.
`tasks/get` and `tasks/cancel` (`extension.TasksExtension`) read the store, so any server
on the same records answers them; a task is its caller's (tenant and principal): anyone
else gets the unknown-task answer. A `request_capability` asking the human becomes a task
in `input_required`, answered by tasks/update (`inputs.py`). `wire.py` writes the
extension's shapes.

The package imports none of its modules, which import each other (`from . import wire`):
the server takes what it needs from each (`tasks.extension`, `tasks.jobs`).
"""
