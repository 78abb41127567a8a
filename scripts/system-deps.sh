#!/usr/bin/env bash
# System packages the test suite needs beyond Python: Debian's Chromium for the
# browser test (never a browser download) and RabbitMQ (the second broker every
# end-to-end and fault test runs on). Installed once, when missing.
set -euo pipefail

if [ ! -x /usr/bin/chromium ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "system-deps: installing Debian's chromium (for tests/browser)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "system-deps: /usr/bin/chromium is missing and cannot be installed here (need root and apt-get)" >&2
    exit 1
  fi
fi

if ! command -v rabbitmq-server >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "system-deps: installing Debian's rabbitmq-server (the second broker of the tests)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
  else
    echo "system-deps: rabbitmq-server is missing and cannot be installed here (need root and apt-get)" >&2
    exit 1
  fi
fi
