"""The OpenID Connect provider the SSO tests sign in through: django-oauth-toolkit's, in a second process.

A tiny Django project of its own (``tests.sso.provider.settings``: its own PostgreSQL database, its
RS256 key from the test, the groups as Django groups in a ``groups`` claim), served by gunicorn on
loopback, its session and CSRF cookies named apart from the console's (both are on ``localhost``). ``tool`` sets
it up and changes a user's groups from the test.
"""
