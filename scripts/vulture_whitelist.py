"""What vulture (``make lint``) cannot see used: names the frameworks reach by name. Never imported nor run.

Each expression names attributes (``_.name``); vulture then counts every definition of that name as used.
Only names a framework reaches belong here: code nothing reaches is deleted, not listed. Functions and
classes registered by a decorator (admin, checks, DRF actions, Celery tasks, fixtures, hypothesis rules)
are covered by ``ignore_decorators`` in pyproject.toml.
"""

from typing import Any

_: Any = None

# Django settings, read by name (project/settings.py; tests' overrides).
_.DEBUG, _.ALLOWED_HOSTS, _.INSTALLED_APPS, _.MIDDLEWARE, _.ROOT_URLCONF, _.WSGI_APPLICATION, _.TEMPLATES
_.DEFAULT_AUTO_FIELD, _.AUTH_PASSWORD_VALIDATORS, _.LANGUAGE_CODE, _.TIME_ZONE, _.USE_I18N, _.USE_TZ
_.STATIC_URL, _.WHITENOISE_USE_FINDERS, _.REST_FRAMEWORK, _.SPECTACULAR_SETTINGS, _.CACHES
# Celery's settings (namespace CELERY, project/celery.py).
_.CELERY_BROKER_HEARTBEAT, _.CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP, _.CELERY_BROKER_CONNECTION_RETRY
_.CELERY_BROKER_CONNECTION_MAX_RETRIES, _.CELERY_BROKER_CONNECTION_TIMEOUT, _.CELERY_TASK_PUBLISH_RETRY
_.CELERY_TASK_PUBLISH_RETRY_POLICY, _.CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS
_.CELERY_RESULT_BACKEND, _.CELERY_TASK_IGNORE_RESULT, _.CELERY_TASK_ACKS_LATE, _.CELERY_TASK_REJECT_ON_WORKER_LOST
_.CELERY_WORKER_PREFETCH_MULTIPLIER, _.CELERY_TASK_SOFT_TIME_LIMIT, _.CELERY_TASK_TIME_LIMIT
_.CELERY_TASK_ALWAYS_EAGER, _.CELERY_BEAT_SCHEDULER, _.CELERY_TIMEZONE, _.CELERY_WORKER_HIJACK_ROOT_LOGGER
_.CELERY_TASK_ROUTES
# gunicorn.conf.py: settings and server hooks, read by name.
_.worker_class, _.keepalive, _.worker_tmp_dir
_.child_exit, _.post_worker_init, _.pre_fork, _.post_fork
# Named by dotted path in settings or configuration: middleware, the Celery app's AMQP class, app configs,
# error handlers, the schema hook, a gunicorn application factory, the benchmarks' child entry points.
_.BodySizeLimitMiddleware, _.DatabaseUnavailableMiddleware, _.ServerHeardMiddleware, _.BrokerAMQP
_.FleetConfig, _.RolloutConfig
_.handler400, _.handler404, _.handler500, _.postprocess_schema, _.counting_application, _.run_in_process, _.run_probe
_.ApiKeyAuthentication, _.FleetAdmin, _.ApiKeyScheme, _.AgentTokenScheme
_.FleetAdminConfig, _.FleetAdminSite, _.default_site  # INSTALLED_APPS names the config, whose default_site the site

# Django: app configs, models' Meta and fields read through querysets, choices, management commands, forms.
_.verbose_name, _.verbose_name_plural, _.default_auto_field, _.constraints
_.field_class  # django-filter reads a filter's form field class by name
_.registered_at, _.recorded_at, _.delivered_at, _.revoked_at, _.last_heard_at  # written, read by the admin
_.timeouts_due_at  # TickRequest's, written and read through querysets only (rollout/controller/timeouts.py)
_.MAINTENANCE  # a Workflow.Kind choice
_.REFUSED_BAD_ROOT, _.REFUSED_BAD_SIGNATURE, _.REFUSED_WRONG_VERSION, _.REFUSED_EXPIRED
_.REFUSED_SEQUENCE_ROLLBACK, _.REFUSED_DIGEST_MISMATCH  # NodeUpgrade.Reason choices, stored as "refused:<code>"
_.REFUSED_DOWNLOAD_FAILED
_.crontab, _.expire_seconds, _.enabled  # django-celery-beat's PeriodicTask fields
_.help, _.requires_system_checks  # BaseCommand
_.label_from_instance, _.clean_waves, _.clean_maintenance_windows, _.required, _.envelope_file, _.envelope_text
_.clean_labels  # NodeLabelsForm (fleet/admin_nodes.py)
_.output_field, _.as_sql, _.arg_joiner  # Func expressions
_.app_configs  # a system check's signature
_.block_size, _._stream  # FileResponse's chunk size; WSGIRequest's body stream
_.process_exception  # middleware hook
_._srcfile  # the logging module reads it (core/log_lines.py)

# Django admin: ModelAdmin and ListFilter attributes and hooks; what its templates read.
_.list_display, _.list_filter, _.list_select_related, _.search_fields, _.readonly_fields, _.autocomplete_fields
_.can_delete, _.show_full_result_count, _.change_list_template, _.change_form_template, _.Media
_.get_readonly_fields, _.get_fields, _.get_inlines, _.add_view, _.has_finish_permission
_.parameter_name, _.lookups, _.model_admin
_.explain, _.danger, _.in_use  # read by the admin's templates

# DRF and drf-spectacular: views, serializers (camelCase fields and their get_ / validate_ methods), parsers,
# authentication and permission hooks, schema extensions.
_.authentication_classes, _.permission_classes, _.parser_classes, _.filter_backends, _.filterset_class
_.lookup_field, _.lookup_value_regex, _.retrieve, _.partial_update, _.destroy
_.authenticate, _.authenticate_header, _.has_permission
_.default_error_messages, _.default_detail, _.media_type, _.parser_context
_.target_class, _.get_security_definition, _.auto_schema, _.generator
_.get_paginated_response_schema, _.get_schema_operation_parameters
_.validate_code, _.get_online, _.get_daemonVersion, _.get_protocolVersion, _.get_lastSeenAt, _.get_agentToken
_.get_lastError
_.durationMinutes, _.disruptionBudget, _.maintenanceWindows, _.defaultDaemonVersion, _.poolId, _.poolIds, _.nodeId
_.daemonVersion, _.protocolVersion, _.lastSeenAt, _.agentToken, _.startedAt, _.finishedAt, _.heartbeatSeconds
_.specRevision, _.objectType, _.objectId, _.prevHash, _.payloadType, _.registeredAt, _.expiresAt, _.signerPins
_.recordedAt, _.maxFailureRatio, _.soakSeconds, _.upgradeTimeoutSeconds, _.minReadySeconds
_.failureRatioMinSettled, _.pausedReason, _.nextWindowAt, _.inFlight, _.rolledBack, _.settledAt, _.currentWave
_.createdAt, _.completedAt, _.inUse, _.estimatedSeconds, _.previousVersion, _.lastStatusCode, _.lastError
_.excluded, _.lastTickAt
_.deliveredAt, _.createdBy, _.approvalsRequired, _.rolloutApprovals
_.gateIntervalSeconds, _.gateFailureLimit, _.consecutiveFailures
_.startAt, _.endBy, _.endBehavior  # RolloutSerializer and ResumeSerializer fields (the schema reads them)

# Celery: a task class's options; a bootstep's (rollout/tasks.py TickOnConnect).
_.acks_late, _.autoretry_for, _.retry_backoff, _.retry_backoff_max, _.retry_jitter
_.requires

# prometheus_client collectors; httpcore's network backend; http.server and socketserver hooks.
_.describe, _.connect_unix_socket, _.local_address, _.do_GET, _.log_message, _.daemon_threads, _.block_on_close

# Dataclass fields that are data: an event's payload (``data()``), a simulated agent's upgrade record.
_.still_in_flight, _.from_version, _.superseded_by_version, _.taken_over
# Serializer fields that only describe the schema (rollout/api/serializers.py: roll forward, gates that act).
_.abortedReason, _.supersededBy, _.onFailure

# Module __getattr__ (PEP 562): benchmarks/heartbeat_floor.py builds its urlpatterns on first use.
_.__getattr__

# pytest and hypothesis: module marks, fixtures requested for their effect, a monkeypatched signature, the
# state machine's teardown.
_.pytestmark, _.django_db_setup, _.delivery_settings, _.using, _.robust, _.teardown
_.pytest_collection_modifyitems  # tests/parallel.py, a plugin hook

# Celery's app settings and producer pool, set again when a test moves the app to another broker
# (tests/integration/conftest.py).
_.broker_read_url, _.broker_write_url, _._producer_pool
