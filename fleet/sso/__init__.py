"""Single sign-on for the console: OpenID Connect through mozilla-django-oidc (docs/operations.md#single-sign-on).

``config`` reads the settings and parses ``OIDC_ROLE_MAP``; ``discovery`` reads the provider's
discovery document once; ``backend`` verifies the ID token and hands the claims to
``fleet.services.sso``, which syncs the user's tenant and grants; ``views`` are the redirect dance.
"""
