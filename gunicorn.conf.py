"""gunicorn's settings shared by every way the web server is started (compose, the image, the demo,
the tests, the benchmarks): gunicorn reads ./gunicorn.conf.py from its working directory, the repository
root (/app in the image). Options given on a command line override these.

gunicorn bounds the request line and headers (below, its defaults made explicit) but not the body:
project's core.middleware.BodySizeLimitMiddleware refuses a body over 1 MiB (413) without reading it whole.
"""

# The request line (method, path and query): longer answers 400; it holds ids and filters only.
limit_request_line = 4094
# At most this many header fields, each at most this many bytes: more answers 431.
limit_request_fields = 100
limit_request_field_size = 8190


def child_exit(server, worker) -> None:
    """prometheus-client's multiprocess mode: forget a dead worker's live gauges (docs/operations.md, Metrics)."""
    from core.metrics import mark_process_dead

    mark_process_dead(worker.pid)
