"""Benchmarks of the rollout project: ``python -m benchmarks [names]`` (``make bench ARGS=...``).

See docs/benchmarks.md. Each benchmark is a module with ``main(argv) -> int``
that runs on its own PostgreSQL database (dropped and recreated) on the server
named by DATABASE_URL.
"""
