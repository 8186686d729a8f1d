#!/bin/sh
# meson install script: puts the example config at /etc/parallax/parallaxd.conf
# unless one is already there (a reinstall never overwrites the admin's file).
set -e
src="$1"
dst="${DESTDIR:-}/etc/parallax/parallaxd.conf"
if [ ! -e "$dst" ]; then
    mkdir -p "$(dirname "$dst")"
    cp "$src" "$dst"
    chmod 0644 "$dst"
    echo "Installing $src to $dst"
else
    echo "Keeping existing $dst"
fi
