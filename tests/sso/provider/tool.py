"""Set the test provider up and change it from the test: ``python -m tests.sso.provider.tool <command> ...``.

``client <id> <secret> <redirect-uri>``: the console's client registration (confidential, authorization
code, RS256, no consent screen). ``user <name> <password> [group ...]``: a user and exactly these groups.
"""

from __future__ import annotations

import os
import sys

import django


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.sso.provider.settings")
    django.setup()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from oauth2_provider.models import Application

    command, *args = argv
    if command == "client":
        client_id, secret, redirect_uri = args
        Application.objects.update_or_create(
            client_id=client_id,
            defaults={
                "name": "rollout console",
                "client_secret": secret,
                "client_type": Application.CLIENT_CONFIDENTIAL,
                "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
                "redirect_uris": redirect_uri,
                "algorithm": Application.RS256_ALGORITHM,
                "skip_authorization": True,
            },
        )
    elif command == "user":
        name, password, *groups = args
        user, _ = get_user_model().objects.get_or_create(username=name, defaults={"email": f"{name}@example.com"})
        user.set_password(password)
        user.save()
        user.groups.set([Group.objects.get_or_create(name=group)[0] for group in groups])
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
