#!/bin/sh
# Checks systemd/parallaxd.service.in: `systemd-analyze verify` accepts it
# without a single warning (with ExecStart pointing at the built parallaxd;
# a copy with a misspelt key must draw one, so the check has teeth), it
# holds what the issue asks for (Type=notify, WatchdogSec, KillMode=process,
# StateDirectory/RuntimeDirectory/ConfigurationDirectory, a dedicated user,
# NVIDIA devices allowed, no PrivateDevices), and systemd-sysusers accepts
# the sysusers companion. Exit 77 (skip) without systemd-analyze.
# Usage: test_unit.sh SRCDIR PARALLAXD
set -eu
src=$1
exe=$(readlink -f "$2")
command -v systemd-analyze >/dev/null 2>&1 || { echo "SKIP: no systemd-analyze"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s#@SBINDIR@/parallaxd#$exe#; s#@DATADIR@#/usr/share#" "$src/parallaxd.service.in" \
    > "$tmp/parallaxd.service"
out=$(systemd-analyze verify "$tmp/parallaxd.service" 2>&1) || { echo "$out"; exit 1; }
[ -z "$out" ] || { echo "systemd-analyze verify warns:"; echo "$out"; exit 1; }
sed 's/^NoNewPrivileges=yes/NoNewPrivileges=yes\nNoNewPrivilege=yes/' "$tmp/parallaxd.service" \
    > "$tmp/bad.service"
bad=$(systemd-analyze verify "$tmp/bad.service" 2>&1 || true)
echo "$bad" | grep -q "Unknown key 'NoNewPrivilege'" || { echo "negative control: $bad"; exit 1; }
for want in '^Type=notify$' '^WatchdogSec=' '^KillMode=process$' '^StateDirectory=parallax$' \
            '^RuntimeDirectory=parallax$' '^ConfigurationDirectory=parallax$' '^User=parallax$' \
            '^DeviceAllow=char-nvidia-frontend rw$' '^DeviceAllow=char-nvidia-uvm rw$' \
            '^NotifyAccess=main$'; do
  grep -q "$want" "$tmp/parallaxd.service" || { echo "unit lacks $want"; exit 1; }
done
if grep -q '^PrivateDevices=yes' "$tmp/parallaxd.service"; then
  echo "PrivateDevices would hide /dev/nvidia*"; exit 1
fi
if command -v systemd-sysusers >/dev/null 2>&1; then
  systemd-sysusers --dry-run "$(readlink -f "$src")/parallax.sysusers.conf" >/dev/null 2>&1 ||
    { echo "systemd-sysusers rejects parallax.sysusers.conf"; exit 1; }
fi
echo "systemd-analyze verify: no warnings; unit keys present; sysusers accepted"
