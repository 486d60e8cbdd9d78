#!/usr/bin/env bash
# mlx-lm-venv.sh makes the test-only Python environment with mlx-lm (the
# reference for MLX-format and quantized checkpoints) in .deps/mlx-lm-venv and
# prints its python. It is idempotent: a stamp records the pinned versions.
#
#   PY="$(scripts/mlx-lm-venv.sh)"
#
# mlx-cpu 0.32.4 is the MLX the project pins (scripts/deps.sh); mlx-lm 0.32.2
# is the release that runs on it.
set -euo pipefail
MLX_VERSION="${MLX_VERSION:-0.32.4}"
MLXLM_VERSION="${MLXLM_VERSION:-0.32.2}"
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.deps/mlx-lm-venv"
want="mlx[cpu]==$MLX_VERSION mlx-lm==$MLXLM_VERSION"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/specula.stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet --disable-pip-version-check $want >&2
  echo "$want" > "$venv/specula.stamp"
fi
echo "$venv/bin/python"
