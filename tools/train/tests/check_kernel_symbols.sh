#!/usr/bin/env bash
# check_kernel_symbols.sh NM OBJECT ISA: fails when the kernel variant
# OBJECT (mlp_kernels_impl.cc built for ISA) defines a global or weak
# symbol outside its own namespaces. Such a symbol (say an inline function
# of a standard header instantiated on float) could be chosen by the linker
# for the other variants' callers too, running this variant's instructions
# on a CPU without them.
set -euo pipefail
nm=$1 object=$2 isa=$3
[[ -f $object ]] || { echo "no object file '$object'" >&2; exit 2; }
symbols=$("$nm" -C --defined-only "$object" | awk '$2 !~ /^[tdbrn]$/ { $1 = ""; $2 = ""; sub(/^  */, ""); print }')
[[ -n $symbols ]] || { echo "no global symbols in '$object' (expected its kernel table)" >&2; exit 1; }
grep -qx "distribute::train::kernels::$isa::kTable" <<<"$symbols" ||
  { echo "'$object' does not define distribute::train::kernels::$isa::kTable" >&2; exit 1; }
# AddressSanitizer adds an ODR indicator, __odr_asan.<mangled name>, for
# each global it instruments; nm cannot demangle it, so the variant's own
# namespace is matched in its mangled form (<length><name>).
own_mangled="_ZN10distribute5train7kernels${#isa}${isa}"
foreign=$(grep -v -e "distribute_eigen_$isa" -e "^distribute::train::kernels::$isa::" -e '^DW\.ref\.__gxx_personality_v0$' \
  -e "^__odr_asan\.${own_mangled}" <<<"$symbols" || true)
if [[ -n $foreign ]]; then
  echo "the $isa kernels define symbols another variant could share at link time:" >&2
  echo "$foreign" >&2
  exit 1
fi
echo "$isa: $(wc -l <<<"$symbols") global symbols, all its own"
