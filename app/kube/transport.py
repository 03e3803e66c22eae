"""Kubernetes objects as plain JSON dicts, through the official client's request layer.

``ApiClient.param_serialize`` and ``call_api`` carry the client's configuration, authentication (the
in-cluster token's refresh included) and TLS, without its generated per-operation methods, for two reasons:

- Those methods validate every argument with pydantic and turn a dict body into the client's model and back.
  The quota ledger (a Lease written on the admission path, app/quota/core/encoding.py) paid more CPU for that than
  for the write itself.
- A model drops the fields this client version does not know, which a read-modify-write must keep
  (certgen's Secrets and webhook configurations, certgen/resources.py).
"""

from __future__ import annotations

from typing import Any

import orjson
from kubernetes import client

from app.kube.errors import ApiError

JSON = dict[str, Any]
Timeout = float | tuple[float, float] | None  # seconds: for the whole request, or (connect, read); None: no limit


def request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    timeout: Timeout,
    body: JSON | None = None,
    query: dict[str, str] | None = None,
    action: str = "",
) -> JSON:
    """One call and its answer's JSON. An answer other than 2xx raises ApiError (naming ``action``); a request
    that got no answer raises what the client and urllib3 raise (ApiException for a TLS failure, urllib3's
    HTTPError, OSError)."""
    method, url, headers, payload, _ = api.param_serialize(
        method,
        path,
        query_params=query,
        header_params={"Accept": "application/json", "Content-Type": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, header_params=headers, body=payload, _request_timeout=timeout)
    response.read()
    if 200 <= response.status < 300:
        found: JSON = orjson.loads(response.data or b"{}")
        return found
    raise ApiError.from_response(response.status, response.reason, response.data, action)
