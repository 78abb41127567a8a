#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    from django.core.management import execute_from_command_line
    from django.db import OperationalError

    try:
        execute_from_command_line(sys.argv)
    except OperationalError as exc:
        from core.database import connection_failure_line

        line = connection_failure_line(exc)
        if line is None:
            raise
        sys.exit(f"manage.py: {line}")


if __name__ == "__main__":
    main()
