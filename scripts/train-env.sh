#!/usr/bin/env bash
# Make the training recipe's Python environment under .deps/train-venv
# (pinned by train/requirements.txt). Idempotent: a stamp holding the
# requirements' hash skips the install when nothing changed. Two runs at once
# wait for each other through a lock folder.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.deps/train-venv
stamp="$venv/.requirements.sha256"
want=$(sha256sum train/requirements.txt | cut -d' ' -f1)
mkdir -p .deps
lock=.deps/train-venv.lock
for _ in $(seq 1 600); do mkdir "$lock" 2>/dev/null && break; sleep 1; done
[ -d "$lock" ] || { echo "train-env: $lock is held for 10 minutes; remove it if no install is running" >&2; exit 1; }
trap 'rmdir "$lock"' EXIT
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
py=${PYTHON:-python3}
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "train-env: the training code needs Python >= 3.11 ($py is $("$py" --version 2>&1))" >&2; exit 1; }
echo "train-env: installing train/requirements.txt into $venv (torch is large: a few minutes the first time)" >&2
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/pip" install --quiet -r train/requirements.txt
echo "$want" > "$stamp"
echo "train-env: ready ($venv/bin/python)" >&2
