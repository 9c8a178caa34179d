#!/usr/bin/env bash
# Runs a command as if on a CPU with AVX2 but without AVX-512, AVX-VNNI or AMX (so without fast bfloat16), for speed
# figures of users' machines on an AVX-512 one: every library in the process picks its AVX2 kernels.
#
#   bash benchmarks/avx2_only.sh python benchmarks/speed_peers.py --task reach --chunk 200 --rounds 15 --core 1
#
# How: benchmarks/avx2_only.c, compiled here with gcc into a cache folder and preloaded, traps the CPUID instruction
# and clears those features' bits (Linux's CPUID faulting: the CPU must list `cpuid_fault` in /proc/cpuinfo). glibc's
# own string functions are held to AVX2 by its tunables, and inductor compiles into a cache folder of its own, so no
# kernel compiled for AVX-512 is reused. What stays: the core's other traits (its caches, its clock, two 256-bit FMA
# units as on most AVX2 cores), so this approximates an AVX2 machine; it does not stand in for one.
#
#   bash benchmarks/avx2_only.sh --switches COMMAND
#
# holds the libraries to AVX2 by their own switches instead, on CPUs that cannot trap CPUID (AMD's among them):
# PyTorch's kernels and inductor's vector code (ATEN_CPU_CAPABILITY), gcc compiling inductor's kernels
# (TORCHINDUCTOR_CPP_MARCH), oneDNN (ONEDNN_MAX_CPU_ISA), MKL (MKL_ENABLE_INSTRUCTIONS), NumPy
# (NPY_DISABLE_CPU_FEATURES) and glibc. JAX has no such switch for its products (YNNPACK reads CPUID itself), so
# figures under --switches compare PyTorch libraries only: not against SBX.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/herl-avx2-only"
mkdir -p "$cache"
hwcaps="-AVX512F,-AVX512CD,-AVX512BW,-AVX512DQ,-AVX512ER,-AVX512PF,-AVX512VL,-AVX512_VNNI,-AVX512_BF16,-AVX512_FP16"
export GLIBC_TUNABLES="glibc.cpu.hwcaps=$hwcaps${GLIBC_TUNABLES:+:$GLIBC_TUNABLES}"
if [[ "${1:-}" == "--switches" ]]; then
    shift
    export ATEN_CPU_CAPABILITY=avx2 TORCHINDUCTOR_CPP_MARCH=x86-64-v3 ONEDNN_MAX_CPU_ISA=AVX2
    export MKL_ENABLE_INSTRUCTIONS=AVX2 NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"
    export TORCHINDUCTOR_CACHE_DIR="$cache/inductor-switches"
    exec "$@"
fi
if ! grep -qw cpuid_fault /proc/cpuinfo; then
    echo "avx2_only.sh: this CPU or kernel cannot trap CPUID (no cpuid_fault in /proc/cpuinfo); use --switches" >&2
    exit 3
fi
if [[ ! -f "$cache/avx2_only.so" || "$here/avx2_only.c" -nt "$cache/avx2_only.so" ]]; then
    gcc -O2 -shared -fPIC -o "$cache/avx2_only.so.tmp" "$here/avx2_only.c"
    mv "$cache/avx2_only.so.tmp" "$cache/avx2_only.so"
fi
export TORCHINDUCTOR_CACHE_DIR="$cache/inductor"
export LD_PRELOAD="$cache/avx2_only.so${LD_PRELOAD:+ $LD_PRELOAD}"
exec "$@"
