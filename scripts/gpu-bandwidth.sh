#!/usr/bin/env bash
# gpu-bandwidth.sh prints the memory bandwidth in bytes/s of the first GPU
# nvidia-smi names, for the benchmarks' fraction of the bandwidth bound:
# H200 4.8e12, H100 SXM 3.35e12, H100 NVL 3.9e12, H100 PCIe 2.0e12. It prints
# nothing when there is no nvidia-smi or no GPU, and nothing (with a line on
# stderr asking for BANDWIDTH) for a GPU it does not know.
set -uo pipefail
name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)"
[ -n "$name" ] || exit 0
case "$name" in
  *H200*) echo 4.8e12 ;;
  *"H100 NVL"*) echo 3.9e12 ;;
  *"H100 PCIe"*) echo 2.0e12 ;;
  *H100*) echo 3.35e12 ;;
  *) echo "gpu-bandwidth: no bandwidth known for '$name': set BANDWIDTH=bytes/s for the fraction of the bound" >&2 ;;
esac
