#!/usr/bin/env bash
# Debian packages the stack needs at run time. Idempotent and quiet when all are present.
set -euo pipefail
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v git >/dev/null 2>&1 || need+=(git)
# libseccomp: tests/workspace/test_seccomp_profile.py compiles deploy/seccomp-agent-runner.json with it.
/sbin/ldconfig -p 2>/dev/null | grep 'libseccomp\.so\.2' >/dev/null || need+=(libseccomp2)
# haproxy: the edge proxy of deploy/compose.yaml; the tests check its configuration (haproxy -c).
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
# setpriv --pdeathsig: the launcher's children stop with it, however it dies (embedded.orphan_safe).
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
# Headless Chromium for the browser test of the web UI (driven by playwright-core).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "popagent needs these Debian packages: ${need[*]} (run: sudo apt-get install -y ${need[*]})" >&2
  exit 1
fi
echo "installing Debian packages: ${need[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
