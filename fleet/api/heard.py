"""An API request that Django answers says the server can hear (docs/controller.md#liveness-against-the-fleet).

The fleet's pulse (fleet/services/liveness.py) tells a silent server from a silent fleet: while nothing is heard,
no node is skipped or failed for looking offline. Agents are not the only ones heard: an API request answered
here (an operator, automation, a monitor) shows the web tier up and the database reachable, so a fleet that stays
silent meanwhile is silent itself, and its offline nodes are judged as such. At most one write a second per
process (``pulse_heard``); a database that is down writes nothing, and the request's answer says so. The agents'
own requests are not written here: their statements write the pulse. ``FLEET_HEARD_BY_API=false`` turns it
off (the test suite does, so that a request's statements are counted alike whenever it comes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from core.database import DATABASE_ERRORS
from fleet.api.limits import AGENT_PREFIX, API_PREFIX
from fleet.services.liveness import pulse_heard


class ServerHeardMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        path = request.path
        if path.startswith(API_PREFIX) and not path.startswith(AGENT_PREFIX) and settings.FLEET_HEARD_BY_API:
            with contextlib.suppress(*DATABASE_ERRORS):  # the database is down: nothing heard (the answer said 503)
                pulse_heard(now=timezone.now())
        return response
