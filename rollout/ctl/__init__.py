"""``python -m rollout.ctl``: the operators' command line (docs/ctl.md).

A plain HTTP client of the API (``httpx``) that draws with ``rich``: no Django and no server code
(an import-linter contract in pyproject.toml says so), so it runs wherever Python and the two libraries
do, against any server it can reach.
"""
