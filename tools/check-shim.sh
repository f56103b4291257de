#!/usr/bin/env bash
# A shim's contract with the processes it lives in: glibc only (no newer than the floor), and exactly the real
# library's exports. Usage: check-shim.sh LIBRARY [EXPORTS] (default: the CUDA shim's frontend/driver_exports.txt)
set -euo pipefail
shim=$1
root=$(cd "$(dirname "$0")/.." && pwd)
exports_file=${2:-$root/frontend/driver_exports.txt}
deps=$(ldd "$shim" | awk '{print $1}' | grep -vE '^(linux-vdso\.so\.1|libc\.so\.6|/lib64/ld-linux-x86-64\.so\.2)$' || true)
if [ -n "$deps" ]; then echo "check-shim: $shim depends on more than glibc: $deps"; exit 1; fi
# The oldest glibc the shim supports (docs/operations.md): no symbol version newer than this may be needed.
glibc_floor=2.35
newest=$(objdump -T "$shim" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
if [ "$(printf '%s\n%s\n' "$newest" "$glibc_floor" | sort -V | tail -1)" != "$glibc_floor" ]; then
  echo "check-shim: $shim needs glibc $newest, newer than the supported floor $glibc_floor:"
  objdump -T "$shim" | grep "GLIBC_$newest"
  exit 1
fi
exported=$(nm -D --defined-only "$shim" | awk '{print $3}' | sort)
expected=$(sort "$exports_file")
if [ "$exported" != "$expected" ]; then
  echo "check-shim: exports differ from $exports_file:"
  diff <(echo "$expected") <(echo "$exported") | head -20
  exit 1
fi
echo "check-shim: $(basename "$shim") links glibc only (symbols up to GLIBC_$newest) and exports exactly the $(echo "$expected" | wc -l) names of $(basename "$exports_file")"
