"""Bytes the console serves: a run's artifacts (downloads only), a browse run's screenshot,
and the console's own static files.

A sandbox chose an artifact's bytes and its name, so a download is never shown in the
browser: it is `application/octet-stream`, `Content-Disposition: attachment` with the name
percent-encoded (and a plain ASCII fallback), `nosniff`, and a CSP that lets nothing in it
run. It is streamed in chunks, never held whole. A screenshot is served, as `image/png`,
only when `tools.browse_result.screenshot_png` (the image validation `tools/images.py` does for
the agent) accepts its bytes. The static files are read once from this package; no other
name is served.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import PurePosixPath
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute

from airlock.store import ArtifactRecord, BlobStore
from airlock.tools.browse_result import SCREENSHOT_FILE, screenshot_png

from .app import HERE, Console, Visit, get

CHUNK_BYTES = 256 * 1024
DOWNLOAD_CSP = "default-src 'none'; sandbox; frame-ancestors 'none'"
STATIC_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
STATIC = {
    path.name: (path.read_bytes(), STATIC_TYPES[path.suffix])
    for path in sorted((HERE / "static").iterdir())
    if path.suffix in STATIC_TYPES
}
_PLAIN = re.compile(r"[^A-Za-z0-9._-]")


def routes(console: Console) -> list[BaseRoute]:
    return [
        get("/runs/{run_id}/artifacts/{path:path}", console.page(download)),
        get("/runs/{run_id}/screenshot", console.page(screenshot)),
        get("/static/{name}", static),
    ]


def attachment(path: str) -> str:
    """A Content-Disposition that saves the file under its own name, never opens it."""
    name = PurePosixPath(path).name or "artifact"
    fallback = _PLAIN.sub("_", name)[:100] or "artifact"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


async def _chunks(blobs: BlobStore, record: ArtifactRecord) -> AsyncIterator[bytes]:
    offset = 0
    while offset < record.size:
        chunk = await blobs.read(record.sha256, offset, CHUNK_BYTES)
        if not chunk:
            return
        offset += len(chunk)
        yield chunk


async def download(console: Console, request: Request, visit: Visit) -> Response:
    run_id, path = str(request.path_params["run_id"]), str(request.path_params["path"])
    record = await visit.services.db.get_artifact(run_id, path)
    if record is None:
        return console.problem(request, 404, "No such artifact of that run.", visit=visit)
    return StreamingResponse(
        _chunks(visit.services.blobs, record),
        media_type="application/octet-stream",
        headers={
            "content-disposition": attachment(record.path),
            "content-length": str(record.size),
            "content-security-policy": DOWNLOAD_CSP,
        },
    )


async def screenshot(console: Console, request: Request, visit: Visit) -> Response:
    services = visit.services
    run_id = str(request.path_params["run_id"])
    run = await services.db.get_run(run_id)
    found = None
    if run is not None and run.language == "browse":
        found = await screenshot_png(
            services.blobs, await services.db.get_artifact(run.id, SCREENSHOT_FILE)
        )
    if found is None:
        return console.problem(
            request, 404, "That run has no screenshot that is a well-formed PNG.", visit=visit
        )
    headers = {"content-security-policy": DOWNLOAD_CSP}
    return Response(found[0], media_type="image/png", headers=headers)


async def static(request: Request) -> Response:
    found = STATIC.get(str(request.path_params["name"]))
    if found is None:
        return Response("no such file", status_code=404, media_type="text/plain")
    content, media_type = found
    return Response(content, media_type=media_type)
