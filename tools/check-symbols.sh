#!/usr/bin/env bash
# check-symbols.sh LIB.a... — every symbol a library exports is rgpu's: C names
# start with rgpu_; C++ names (the CUDA backend) are in an rgpu_* namespace or
# start with rgpu_, or have internal linkage (anonymous namespace; nvcc still
# emits those as global). Template instantiations of the C++ standard library
# (weak, merged by the linker), the compiler's DW.ref helpers and ASan's __odr_asan
# markers are allowed.
# Prints the offenders and exits 1 if there are any.
set -u
bad=$(nm -g --defined-only "$@" 2>/dev/null | awk 'NF == 3 && $2 != "V" && $2 != "W" && $2 != "w" {print $3}' | sort -u |
  while read -r s; do
    case $s in
      rgpu_*|DW.ref.*|__odr_asan.*) continue ;;   # __odr_asan: ASan builds
      _Z*) d=$(printf '%s\n' "$s" | c++filt)
           case $d in
             rgpu_*|"(anonymous namespace)::"*|"std::"*|"void std::"*) continue ;;
             __device_stub__*) case $s in *rgpu_*|*_GLOBAL__N_*) continue ;; esac ;;
           esac
           echo "$d" ;;
      *) echo "$s" ;;
    esac
  done)
if [ -n "$bad" ]; then
  echo "check-symbols: $(printf '%s\n' "$bad" | wc -l) exported symbols without the rgpu_ prefix:"
  printf '%s\n' "$bad" | sed 's/^/  /'
  exit 1
fi
echo "check-symbols: every exported symbol of $# libraries starts with rgpu_"
