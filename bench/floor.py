"""The floor: the least a Flask webhook under the same gunicorn settings can do.

It reads and parses the body and answers a fixed allowed AdmissionReview that
echoes the uid. Whatever the product spends beyond this is its own cost.
Served as ``gunicorn -c gunicorn.conf.py bench.floor:app``.
"""

from __future__ import annotations

import json

from flask import Flask, Response, request

app = Flask(__name__)


@app.post("/webhook")
def webhook() -> Response:
    document = json.loads(request.get_data())
    answer = {
        "apiVersion": document["apiVersion"],
        "kind": "AdmissionReview",
        "response": {"uid": document["request"]["uid"], "allowed": True, "status": {"metadata": {}, "code": 200}},
    }
    return Response(json.dumps(answer, separators=(",", ":")), mimetype="application/json")


@app.get("/readyz")
def readyz() -> Response:
    return Response('{"ready":true}', mimetype="application/json")
