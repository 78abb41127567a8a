"""The API as the command line sees it: JSON in and out over ``httpx``, every refusal one ``ApiError``.

Paths are relative to ``<server>/api/compute/``. A list is read whole by following its ``next`` link as
the server wrote it (docs/api.md#lists) until it is null.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

API_ROOT = "/api/compute"
#: Answers worth asking again while following a rollout: the server is busy, restarting or throttling.
TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})


@dataclass
class ApiError(Exception):
    """A refusal: the API's error body (``code``, ``detail`` and its extra fields), or one of ours in the
    same shape when there was no answer to read (``unreachable``, ``invalid_answer``, ``no_api_key``…)."""

    code: str
    detail: str
    status: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: Seconds the answer's ``Retry-After`` asked to wait before asking again (None when it said nothing).
    retry_after: float | None = None

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"

    @property
    def transient(self) -> bool:
        """Worth asking again: no answer at all, or an answer that says "later"."""
        return self.code == "unreachable" or self.status in TRANSIENT_STATUSES

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "detail": self.detail, **self.extra}

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        try:
            body = response.json()
        except ValueError:
            body = None
        later = retry_after(response.headers.get("Retry-After"))
        if isinstance(body, dict) and isinstance(body.get("code"), str):
            extra = {k: v for k, v in body.items() if k not in ("code", "detail")}
            return cls(body["code"], str(body.get("detail", "")), response.status_code, extra, later)
        text = " ".join(response.text.split())[:200] or response.reason_phrase
        return cls(f"http_{response.status_code}", text, response.status_code, retry_after=later)


def retry_after(header: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` in seconds (RFC 9110: a number of seconds or an HTTP date); None when absent or unreadable."""
    if not header:
        return None
    header = header.strip()
    if header.isdigit():
        return float(header)
    try:
        when = parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def api_base(server: str) -> str:
    """The API's root for a server given as ``http://host:port`` (or already ending in /api/compute)."""
    server = server.strip().rstrip("/")
    if not server.startswith(("http://", "https://")):
        raise ApiError("invalid_server", f"{server!r} is not an http:// or https:// URL.")
    if not server.endswith(API_ROOT):
        server += API_ROOT
    return server + "/"


class Api:
    """One server and one key; ``with Api(...) as api`` closes its connections."""

    def __init__(self, server: str, key: str, *, timeout: float = 30.0) -> None:
        self.base = api_base(server)
        self.http = httpx.Client(
            base_url=self.base,
            headers={"Authorization": f"Bearer {key}", "User-Agent": "rollout-ctl"},
            timeout=timeout,
        )

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def request(self, method: str, path: str, *, body: Any = None, params: Mapping[str, str] | None = None) -> Any:
        """The decoded JSON of a 2xx answer; otherwise an ApiError."""
        try:
            response = self.http.request(method, path, params=params, json=body)
        except httpx.HTTPError as exc:  # refused, reset, timed out, bad URL: no answer to read
            raise ApiError("unreachable", f"{self.base}: {exc or type(exc).__name__}") from exc
        if not response.is_success:
            raise ApiError.from_response(response)
        try:
            return response.json()
        except ValueError as exc:
            raise ApiError("invalid_answer", f"{response.url} answered {response.status_code} without JSON.") from exc

    def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None, params: Mapping[str, str] | None = None) -> Any:
        return self.request("POST", path, body=body, params=params)

    def pages(self, path: str, params: Mapping[str, str] | None = None) -> Iterator[dict[str, Any]]:
        """Every row of a list, page after page."""
        page = self.get(path, params)
        while True:
            if not isinstance(page, dict) or not isinstance(page.get("results"), list):
                raise ApiError("invalid_answer", f"{path} answered something that is not a list page.")
            yield from page["results"]
            if not page.get("next"):
                return
            page = self.get(page["next"])  # absolute: it carries the filters, the limit and the cursor
