#!/usr/bin/env bash
# pyclients.sh makes the Python environment the serving tests drive
# `specula serve` with: the real `openai` and `ollama` client packages from
# PyPI, pinned, in a virtual environment under .deps/pyclients (git-ignored).
# It is idempotent: a stamp records the pins installed. Prints the path of
# the environment's python on stdout.
set -euo pipefail

OPENAI_VERSION="${OPENAI_VERSION:-3.51.0}"
OLLAMA_VERSION="${OLLAMA_VERSION:-0.6.3}"
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.deps/pyclients"
want="openai==$OPENAI_VERSION ollama==$OLLAMA_VERSION"
stamp="$venv/specula.stamp"

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$venv/bin/python"
  exit 0
fi
python=""
for p in python3 python; do
  if command -v "$p" >/dev/null 2>&1; then python="$p"; break; fi
done
if [ -z "$python" ]; then
  echo "pyclients: Python 3 is needed for the serving tests' real clients" >&2
  exit 1
fi
rm -rf "$venv"
echo "pyclients: installing $want into .deps/pyclients" >&2
"$python" -m venv "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check $want >&2
echo "$want" > "$stamp"
echo "$venv/bin/python"
