#!/usr/bin/env bash
# The main job: set up (install + build), then run the demonstration.
# Until the training runtime lands this shows the programs' --help.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/setup.sh"
bin="$root/build/release/bin"
"$bin/dctrain-coordinator" --version
"$bin/dctrain-coordinator" --help
"$bin/dctrain-worker" --help
