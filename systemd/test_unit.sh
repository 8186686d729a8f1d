#!/bin/sh
# Checks systemd/parallaxd.service.in: `systemd-analyze verify` accepts it
# without a single warning (with ExecStart pointing at the built parallaxd;
# a copy with a misspelt key must draw one, so the check has teeth), it
# holds what the issue asks for (Type=notify, WatchdogSec, KillMode=process,
# StateDirectory/RuntimeDirectory/ConfigurationDirectory, a dedicated user,
# NVIDIA devices allowed by groups some driver registers, no PrivateDevices),
# and systemd-sysusers accepts
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
            '^DevicePolicy=closed$' '^DeviceAllow=char-nvidia rw$' \
            '^DeviceAllow=char-nvidia-frontend rw$' '^DeviceAllow=char-nvidia-uvm rw$' \
            '^NotifyAccess=main$'; do
  grep -q "$want" "$tmp/parallaxd.service" || { echo "unit lacks $want"; exit 1; }
done
if grep -q '^PrivateDevices=yes' "$tmp/parallaxd.service"; then
  echo "PrivateDevices would hide /dev/nvidia*"; exit 1
fi
# every char- group allowed is one a driver registers in /proc/devices (a
# misspelt group allows nothing, silently): NVIDIA's (nvidia for 195 on
# newer drivers, nvidia-frontend on older) and rdma-core's
known=' nvidia nvidia-frontend nvidia-uvm nvidia-caps nvidia-nvswitch infiniband_verbs infiniband_mad '
for g in $(sed -n 's/^DeviceAllow=char-\([^ ]*\) .*/\1/p' "$tmp/parallaxd.service"); do
  case "$known" in *" $g "*) ;; *) echo "DeviceAllow=char-$g: no driver registers '$g'"; exit 1;; esac
done
# on a node with the NVIDIA driver loaded, its /dev/nvidia* majors are allowed
if [ -r /proc/devices ] && ls /dev/nvidiactl >/dev/null 2>&1; then
  for dev in /dev/nvidiactl /dev/nvidia0 /dev/nvidia-uvm; do
    [ -c "$dev" ] || continue
    major=$(printf '%d' "0x$(stat -c %t "$dev")")
    group=$(awk -v m="$major" '$1 == m {print $2; exit}' /proc/devices)
    grep -q "^DeviceAllow=char-$group rw$" "$tmp/parallaxd.service" ||
      { echo "$dev (major $major, group $group) is not allowed"; exit 1; }
  done
fi
if command -v systemd-sysusers >/dev/null 2>&1; then
  systemd-sysusers --dry-run "$(readlink -f "$src")/parallax.sysusers.conf" >/dev/null 2>&1 ||
    { echo "systemd-sysusers rejects parallax.sysusers.conf"; exit 1; }
fi
echo "systemd-analyze verify: no warnings; unit keys present; sysusers accepted"
