"""Asking one gate (docs/controller.md#gates), without Django: a Prometheus query or an HTTP GET, judged.

Every probe returns an ``Outcome`` and never raises. The exchange is the webhooks' (one implementation:
``rollout.webhooks.transport.exchange_pinned``): the host is resolved once and every address it gives
is checked (``resolve_checked``), the connection goes to one of those very addresses, the whole
exchange is bounded by ``TIMEOUT_SECONDS`` and at most ``MAX_ANSWER_BYTES`` of the answer are read.

- Prometheus: ``GET {url}/api/v1/query?query=…``. A pass when every sample of the instant vector is
  at most ``maximum`` (the value shown is the largest sample); an empty vector is a pass (no alert
  firing). Anything the API does not promise (not JSON, an error status, a matrix or a scalar, a
  sample that is not a finite number, an answer over 1 MiB) is ``inconclusive``, its detail the reason in
  Prometheus' own words where it gave some (its ``error``). A query Prometheus refuses (HTTP 400,
  ``errorType: bad_data``: PromQL that does not parse) is also ``refused``: the create answers 400
  ``invalid_gate`` with that text (docs/controller.md#gates).
- HTTP: ``GET`` the gate's URL: a 2xx status is a pass, any other status a fail (the value is the
  status); no answer at all is ``inconclusive``.

The detail is null for a pass (nothing to explain), the provider's error for ``inconclusive``, and for a
fail a sentence with the value and the maximum (docs/api.md#rollouts).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from rollout.webhooks.safety import UnsafeURL, parse_url, resolve_checked
from rollout.webhooks.transport import Fetched, exchange_pinned

TIMEOUT_SECONDS = 5.0
MAX_ANSWER_BYTES = 1024 * 1024
#: The longest detail kept (``RolloutGate.detail``): a provider's error text fits whole.
MAX_DETAIL = 1000
USER_AGENT = "rollout-gates/1"

PASS = "pass"  # noqa: S105 - a gate state, not a password
FAIL = "fail"
INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Outcome:
    """A gate's verdict: ``state`` (pass, fail, inconclusive), the value judged, and why in a few words (None for
    a pass). ``refused``: Prometheus' own error when it refused the query itself (400 ``bad_data``)."""

    state: str
    value: float | None
    detail: str | None
    refused: str | None = None


def _inconclusive(detail: str, *, refused: str | None = None) -> Outcome:
    return Outcome(state=INCONCLUSIVE, value=None, detail=detail[:MAX_DETAIL], refused=refused)


def _prometheus_error(fetched: Fetched) -> Outcome:
    """An error status: Prometheus' ``{"status": "error", "errorType", "error"}`` in its words, when it sent it."""
    try:
        answer: Any = json.loads(fetched.body)
    except (ValueError, UnicodeError):
        answer = None
    error = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(error, str) or not error:
        return _inconclusive(f"Prometheus answered HTTP {fetched.status_code}")
    error_type = answer.get("errorType")
    refused = error if fetched.status_code == 400 and error_type == "bad_data" else None
    kind = f" ({error_type})" if isinstance(error_type, str) and error_type else ""
    return _inconclusive(f"Prometheus answered HTTP {fetched.status_code}{kind}: {error}", refused=refused)


def _get(url_text: str, *, allow_private: bool, target: str | None, timeout: float) -> Fetched | Outcome:
    """GET ``url_text`` (``target``: another path and query than the URL's) or the Outcome that says why not."""
    try:
        parsed = parse_url(url_text, allow_http=allow_private)
        if target is not None:
            parsed = dataclasses.replace(parsed, target=target)
        addresses = resolve_checked(parsed.host, parsed.port, allow_private=allow_private)
    except UnsafeURL as exc:
        return _inconclusive(f"{UnsafeURL.code}: {exc}")
    except Exception as exc:  # never raise, whatever the input
        return _inconclusive(f"error: {type(exc).__name__}")
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    return exchange_pinned("GET", parsed, addresses, headers, timeout=timeout, max_bytes=MAX_ANSWER_BYTES)


def prometheus_target(base_url: str, query: str) -> str:
    """The request target of an instant query: the base URL's path, ``/api/v1/query?query=…``."""
    path = parse_url(base_url, allow_http=True).target.split("?", 1)[0].rstrip("/")
    return f"{path}/api/v1/query?query={quote(query, safe='')}"


def prometheus_verdict(fetched: Fetched, *, maximum: float) -> Outcome:
    """Judge Prometheus' answer to an instant query (see the module's docstring)."""
    if fetched.status_code is None:
        return _inconclusive(fetched.error or "no answer")
    if fetched.truncated:
        return _inconclusive(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
    if fetched.error is not None:
        return _inconclusive(fetched.error)
    if not 200 <= fetched.status_code < 300:
        return _prometheus_error(fetched)
    try:
        answer: Any = json.loads(fetched.body)
    except (ValueError, UnicodeError):
        return _inconclusive("the answer is not JSON")
    data = answer.get("data") if isinstance(answer, dict) and answer.get("status") == "success" else None
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        return _inconclusive("the answer is not a successful query result")
    if data.get("resultType") != "vector":
        return _inconclusive(f"the query gives a {data.get('resultType')!s:.20}, not an instant vector")
    values: list[float] = []
    for sample in data["result"]:
        pair = sample.get("value") if isinstance(sample, dict) else None
        if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
            return _inconclusive("a sample is not [time, value]")
        try:
            value = float(pair[1])
        except ValueError:
            return _inconclusive("a sample's value is not a number")
        values.append(value)
    if not values:
        return Outcome(state=PASS, value=None, detail=None)  # no sample: no alert firing
    # A pass is every value <= max: NaN is not (nor is +Inf); -Inf is. Neither infinity nor NaN is a JSON number:
    # such a value is reported as null, and said in the detail.
    if any(math.isnan(value) for value in values):
        return Outcome(state=FAIL, value=None, detail=f"{len(values)} sample(s), one of them NaN: not <= {maximum:g}")
    worst = max(values)
    shown = worst if math.isfinite(worst) else None
    if worst <= maximum:
        return Outcome(state=PASS, value=shown, detail=None)
    return Outcome(state=FAIL, value=shown, detail=f"{len(values)} sample(s), the largest {worst:g} > {maximum:g}")


def prometheus_probe(base_url: str, query: str, *, maximum: float, timeout: float = TIMEOUT_SECONDS) -> Outcome:
    """Ask the installation's Prometheus (``base_url``, trusted configuration: private addresses allowed)."""
    try:
        target = prometheus_target(base_url, query)
    except UnsafeURL as exc:
        return _inconclusive(f"the Prometheus URL is unusable: {exc}")
    fetched = _get(base_url, allow_private=True, target=target, timeout=timeout)
    if isinstance(fetched, Outcome):
        return fetched
    return prometheus_verdict(fetched, maximum=maximum)


def http_probe(url: str, *, allow_private: bool, timeout: float = TIMEOUT_SECONDS) -> Outcome:
    """GET an HTTP gate's URL, checked again now (the webhooks' rules): 2xx pass, another status fail."""
    fetched = _get(url, allow_private=allow_private, target=None, timeout=timeout)
    if isinstance(fetched, Outcome):
        return fetched
    status = fetched.status_code
    if status is None:
        return _inconclusive(fetched.error or "no answer")
    if 200 <= status < 300:
        return Outcome(state=PASS, value=float(status), detail=None)
    return Outcome(state=FAIL, value=float(status), detail=f"HTTP {status}: not a 2xx status")
