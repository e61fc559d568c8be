#!/usr/bin/env bash
# The long crash drill (tests/crash_drill.py): `latlab run` killed with SIGKILL at random
# moments, 20 times per kind of scenario (GStreamer with an emulated link, SRT, WebRTC in
# Chromium, JACK, PulseAudio, Janus with light participants, netem in a User-Mode Linux
# guest); after each kill the next latlab invocation must leave nothing of the dead run,
# touch nothing else (planted look-alikes, a second live run) and the dead run must stay
# readable. Prints a line per kill and a summary; exit status 1 if any kill failed.
#
#   sudo bash scripts/crash-drill.sh                       # every kind, 20 kills each
#   sudo bash scripts/crash-drill.sh --kinds gst,jack --kills 5 --seed 7
#   LATLAB_DRILL_SHARED=1 sudo bash scripts/crash-drill.sh # among the machine's namespaces
#
# By default the drill runs in a mount namespace of its own, with its own /run/netns and
# /run/latlab: on a machine shared with other checkouts, an older latlab (which removed
# namespaces named like a dead latlab's, by the pid in the name) would remove the drill's
# planted look-alikes, and the drill would see its own namespaces only. About 70 minutes
# here for everything (the UML guest is most of it). Run it alone.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${LATLAB_DRILL_SHARED:-}" ]; then
    exec .venv/bin/python -m tests.crash_drill "$@"
fi
exec unshare --mount --propagation private sh -c '
    mkdir -p /run/netns /run/latlab
    mount -t tmpfs -o mode=0755 tmpfs /run/netns
    mount -t tmpfs -o mode=0755 tmpfs /run/latlab
    exec .venv/bin/python -m tests.crash_drill "$@"' sh "$@"
