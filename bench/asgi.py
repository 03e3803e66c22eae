"""The webhook's own Flask app as an ASGI app, for gunicorn 27's ``asgi`` worker (bench/serving.py ``--asgi``),
and each worker's floor.

The app is WSGI; a2wsgi's adapter runs each call in a pool of as many threads as our worker's, so the two
workers serve the same app with the same parallelism. ``floor`` is the least an ASGI webhook can do on that
worker, on its loop, without Flask or a thread: parse the body and answer a fixed allowed review (bench/floor.py's
answer); ``wsgi_floor`` is the same for our worker, so the two workers are also compared without the app.
Bench-only: the image ships neither a2wsgi, uvloop nor gunicorn_h1c.
"""

from __future__ import annotations

import json
import os
from typing import Any

from a2wsgi import WSGIMiddleware

from app import create_app

app = WSGIMiddleware(create_app(), workers=int(os.environ.get("HAMI_WEBHOOK_THREADS", "8")))


def _answer(body: bytes) -> bytes:
    document = json.loads(body)
    answer = {
        "apiVersion": document["apiVersion"],
        "kind": "AdmissionReview",
        "response": {"uid": document["request"]["uid"], "allowed": True, "status": {"metadata": {}, "code": 200}},
    }
    return json.dumps(answer, separators=(",", ":")).encode()


def wsgi_floor(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    data = _answer(environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"])))
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


async def floor(scope: dict[str, Any], receive: Any, send: Any) -> None:
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    data = _answer(body)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})
