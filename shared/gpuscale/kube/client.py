"""One API request by path, as JSON: a status other than 2xx raised as its KubeError, every
``Warning`` header of an answer to :data:`gpuscale.apiwarnings.API_WARNINGS` (counted,
logged once); one saying the server dropped fields we sent is :class:`FieldsDropped`
where warnings are strict (the tests)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import aiohttp

from gpuscale.apiwarnings import API_WARNINGS, parse_warning_header
from gpuscale.kube.errors import FieldsDropped, KubeError, ServerError, Unreachable, error_from_response

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

REQUEST_TIMEOUT_S: Final = 10.0


async def request_json(
    api: ApiClient,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    query: Mapping[str, str] | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> dict[str, Any]:
    """One API request by path: the JSON answer, or a :class:`KubeError`."""
    headers = {"Accept": "application/json", "Content-Type": content_type}
    try:
        response = await api.call_api(
            path,
            method,
            query_params=list(query.items()) if query else None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,  # we read the body and map statuses ourselves
            _request_timeout=timeout_s,
        )
        try:
            raw = await response.read()
            status = int(response.status)
            resp_headers = {str(k): str(v) for k, v in response.headers.items()}
            warnings = [parse_warning_header(str(v)) for v in response.headers.getall("Warning", [])]
        finally:
            response.release()
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise Unreachable(f"{method} {path}: {type(e).__name__}: {e}") from None
    text = raw.decode("utf-8", errors="replace")
    if not 200 <= status <= 299:
        raise error_from_response(status, text, resp_headers)
    dropped = API_WARNINGS.record(method, path, warnings) if warnings else []
    if dropped and API_WARNINGS.strict:
        raise FieldsDropped(status, [w.text for w in dropped])
    if not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except ValueError:
        raise ServerError(status, f"{method} {path}: answer is not JSON") from None
    return doc if isinstance(doc, dict) else {"items": doc}


async def ping(api: ApiClient, timeout_s: float = 3.0) -> tuple[bool, str]:
    """Is the API server answering? Any HTTP answer counts (even 403/404)."""
    try:
        await request_json(api, "GET", "/api", timeout_s=timeout_s)
    except Unreachable as e:
        return False, e.message
    except KubeError as e:
        return True, f"answers ({e.status})"
    return True, "reachable"


async def each_page(
    api: ApiClient,
    path: str,
    take: Callable[[dict[str, Any]], None],
    *,
    limit: int,
    query: Mapping[str, str] | None = None,
) -> None:
    """A collection read ``limit`` items at a time (``limit``/``continue``), each page handed
    to ``take`` and let go before the next is asked for: what a tenant may create (Events,
    HPAs) costs one page of memory, not all of them."""
    params = {**(query or {}), "limit": str(limit)}
    while True:
        page = await request_json(api, "GET", path, query=params)
        token = (page.get("metadata") or {}).get("continue")
        take(page)
        del page
        if not token:
            return
        params = {**(query or {}), "limit": str(limit), "continue": next_continue(path, token, params)}


def next_continue(path: str, token: Any, asked: Mapping[str, str]) -> str:
    """The token for the next page; the one just sent again would ask for the same page forever
    (a broken server or proxy), so it is an error, as the list's other broken answers are."""
    if str(token) == asked.get("continue"):
        raise ServerError(200, f"GET {path}: the answer's continue token is the one sent")
    return str(token)
