"""The Docker backend: one fresh, hardened, network-less container per job.

A job goes: `backend.DockerBackend.sandbox` picks its container (a running pooled one,
`pooling.py`, or a new one, `containers.py`, with the options of `options.py` and the
labels of `labels.py`); `run.py` sends the job over the container's attach (`attach.py`),
feeds what comes back to the sans-IO `sandbox.exchange` and `sandbox.intake`, measures it
(`usage.py`), and `sandbox.outcome` makes the result; the block's end removes the
container (`containers.py`). `events.py` keeps the warm pool true to the engine;
`reaping.py` finds a session's containers and those a dead server left; `engine.py`
connects and words the engine's errors.

The SDK's privates are touched in two adapter modules only, each failing loudly when the
SDK changes (their tests: tests/rooms/sandbox/test_docker_attach.py and
test_docker_connections.py): `sdk_attach.py` (the attach connection as a descriptor) and
`sdk_connections.py` (one connection pool per engine). Blocking SDK calls run in worker
threads; the attach stream is read asynchronously.
"""

from __future__ import annotations

from .backend import DockerBackend, DockerSandbox
from .engine import EngineClient, connect, engine_version, registered_runtimes
from .options import container_options
from .reaping import session_containers

__all__ = [
    "DockerBackend",
    "DockerSandbox",
    "EngineClient",
    "connect",
    "container_options",
    "engine_version",
    "registered_runtimes",
    "session_containers",
]
