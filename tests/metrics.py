"""Reading a running web tier's Prometheus metrics over HTTP, as the tests that start one do."""

from __future__ import annotations

import httpx


def metric_sample(url: str, sample: str) -> int:
    """The value of one sample of ``url``'s /metrics (``name`` or ``name{labels}``, summed over the tier's
    processes by the multiprocess collector); 0 when absent."""
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f"{sample} "):
            return int(float(line.split()[-1]))
    return 0
