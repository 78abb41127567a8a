"""The web container's health check: Django answers a page that needs no database (the admin's login).

Run by docker-compose.yml (the web service's healthcheck) inside the container:
exit 0 when http://127.0.0.1:8000/admin/login/ answers 200. The request's Host is
the first of DJANGO_ALLOWED_HOSTS, so a deployment that allows only its public
name still passes (Django refuses other hosts with 400).
"""

from __future__ import annotations

import os
import sys
import urllib.request

URL = "http://127.0.0.1:8000/admin/login/"


def host() -> str:
    allowed = [h.strip() for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "").split(",") if h.strip()]
    first = allowed[0] if allowed else "localhost"
    if first == "*":
        return "localhost"
    return first.lstrip(".")  # ".example.com" allows example.com


def main() -> int:
    request = urllib.request.Request(URL, headers={"Host": host()})
    try:
        with urllib.request.urlopen(request, timeout=4) as response:  # noqa: S310
            return 0 if response.status == 200 else 1
    except OSError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
