#!/usr/bin/env bash
# Runs the demo that README's first command shows, so CI proves it still works.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo run --quiet --locked -p runlimit-memory --example login_burst
