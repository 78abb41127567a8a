"""The production web tier's application (ASGI): ``gunicorn project.asgi:application``, uvicorn workers.

Agent sessions (plain and held) are answered in async code, everything else by Django's WSGI application on
threads: fleet/watch/ and docs/architecture.md#watch.
"""

import os

import django
from django.utils.module_loading import import_string

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django.setup(set_prefix=False)

application = import_string("fleet.watch.application")()
