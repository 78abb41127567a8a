# One image for every process of the stack: web (gunicorn), worker and beat (Celery), migrate.
# See docs/operations.md. Build: docker compose build (or docker build -t rollout .).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, so a code change does not reinstall them. psycopg[binary] and
# cryptography ship wheels: nothing to compile, no build tools in the image. The lock names
# every package, transitive ones included, and pip checks each downloaded file against its hash.
COPY requirements.lock .
RUN pip install --require-hashes -r requirements.lock

# A non-root user. The code stays root-owned (read-only to the app); the app writes
# only under /data: media (the binaries), the Prometheus multiprocess files, a run dir.
RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --home-dir /data --no-create-home --shell /usr/sbin/nologin app \
    && mkdir -p /data/media /data/prometheus /data/run \
    && chown -R app:app /data

COPY . .

# The admin's static files, collected at build time (no database or secret needed).
RUN DJANGO_SECRET_KEY=collectstatic-only CELERY_BROKER_URL=redis://unused ROLLOUT_RUN_DIR=/tmp \
    python manage.py collectstatic --noinput --verbosity 0

USER app
EXPOSE 8000
# As compose's web: the worker class, workers (WEB_WORKERS) and timeouts are gunicorn.conf.py's (read from /app).
CMD ["gunicorn", "project.asgi:application", "--bind", "0.0.0.0:8000"]
