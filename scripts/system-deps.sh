#!/usr/bin/env bash
# System packages the project needs beyond Python, from Debian's packages (never a download of a
# prebuilt binary), installed once, when missing. `system-deps.sh [chromium] [nginx] [rabbitmq] [prometheus]` (default all):
# - chromium: the browser test (tests/browser);
# - rabbitmq: the second broker every fault test and some end-to-end tests run on (scripts/services.sh
#   starts it when it is not running);
# - nginx: the production web tier on this machine (`make web`, docs/operations.md#the-web-tier) and
#   the tests that run it. Only the binary is used: `make web` and the tests start their own nginx, an
#   unprivileged-port foreground process with the repository's docker/nginx.conf. The package's own
#   service is never started (a policy-rc.d that refuses starts is in place during the install).
# - prometheus: the gates' tests (tests/gates) start their own, on 127.0.0.1 and a free port, scraping
#   an exporter the test controls; the package's service is never started either.
set -euo pipefail

declare -A binary=([chromium]=/usr/bin/chromium [nginx]=/usr/sbin/nginx [rabbitmq]=/usr/sbin/rabbitmq-server
                  [prometheus]=/usr/bin/prometheus)
declare -A package_of=([chromium]=chromium [nginx]=nginx [rabbitmq]=rabbitmq-server [prometheus]=prometheus)
missing=()
for package in "${@:-chromium nginx rabbitmq prometheus}"; do
  for name in $package; do
    [ -n "${binary[$name]:-}" ] || { echo "system-deps: unknown package $name" >&2; exit 2; }
    [ -x "${binary[$name]}" ] || missing+=("$name")
  done
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null || [ "$(id -u)" != 0 ]; then
  echo "system-deps: ${missing[*]} missing and cannot be installed here (need root and apt-get)" >&2
  exit 1
fi
echo "system-deps: installing Debian's ${missing[*]}"
policy=/usr/sbin/policy-rc.d
placed=
if [ ! -e "$policy" ]; then
  # Refuse service starts while the packages install (invoke-rc.d honours it): nothing listens on :80.
  printf '#!/bin/sh\nexit 101\n' > "$policy"
  chmod 755 "$policy"
  placed=1
fi
trap '[ -z "$placed" ] || rm -f "$policy"' EXIT
packages=()
for name in "${missing[@]}"; do packages+=("${package_of[$name]}"); done
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
