"""benchmarks/avx2_only.sh: a command run under it sees an AVX2 CPU (no AVX-512, no fast bfloat16), and faults that
are not CPUID's still reach the program's own handler or end the process as before."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

WRAPPER = Path(__file__).resolve().parents[2] / "benchmarks" / "avx2_only.sh"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a Linux wrapper")

traps_cpuid = pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("gcc") is None or "cpuid_fault" not in Path("/proc/cpuinfo").read_text(),
    reason="needs Linux on a CPU with CPUID faulting, and gcc",
)

PROBE = """
import inspect, numpy, torch
try:
    from torch._inductor.cpu_vec_isa import pick_vec_isa
except ImportError:  # torch < 2.5
    from torch._inductor.codecache import pick_vec_isa
from herl.nn.gemm import cpu_backend
from herl.nn.mlp import has_fast_bfloat16, resolve_precision
features = getattr(numpy, "_core", getattr(numpy, "core", None))._multiarray_umath.__cpu_features__
reads = "ATEN_CPU_CAPABILITY" in inspect.getsource(pick_vec_isa)  # inductor before torch 2.5 did not read it
print(torch.backends.cpu.get_cpu_capability(), has_fast_bfloat16(torch.device("cpu")),
      resolve_precision("auto", torch.device("cpu")), cpu_backend(), pick_vec_isa().bit_width() if reads else 256,
      any(features.get(name, False) for name in ("X86_V4", "AVX512_ICL")))
"""

FAULTS = r"""
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void theirs(int sig) { (void)sig; write(1, "their handler\n", 14); _exit(7); }
int main(int argc, char **argv) {
    __builtin_cpu_init();
    printf("avx2 %d avx512f %d\n", !!__builtin_cpu_supports("avx2"), !!__builtin_cpu_supports("avx512f"));
    fflush(stdout);
    if (argc > 1 && strcmp(argv[1], "handled") == 0) signal(SIGSEGV, theirs);
    *(volatile int *)0 = 1;
    return 0;
}
"""


def run(*command: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run(["bash", str(WRAPPER), *command], capture_output=True, text=True, env=env, timeout=300)


@traps_cpuid
def test_torch_and_herl_see_an_avx2_cpu(tmp_path):
    done = run(sys.executable, "-c", PROBE, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:3] == ["AVX2", "False", "float32"]


def test_the_libraries_own_switches_hold_them_to_avx2(tmp_path):
    """--switches, for CPUs that cannot trap CPUID: PyTorch, inductor, herl's choices and NumPy as on an AVX2 CPU."""
    done = run("--switches", sys.executable, "-c", PROBE, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["AVX2", "False", "float32", "aten", "256", "False"]


@traps_cpuid
def test_a_fault_reaches_the_programs_handler_or_ends_the_process(tmp_path):
    source = tmp_path / "faults.c"
    source.write_text(FAULTS)
    program = tmp_path / "faults"
    subprocess.run(["gcc", "-O0", "-o", str(program), str(source)], check=True)

    handled = run(str(program), "handled", tmp_path=tmp_path)
    assert handled.stdout.splitlines() == ["avx2 1 avx512f 0", "their handler"]
    assert handled.returncode == 7

    unhandled = run(str(program), tmp_path=tmp_path)
    assert unhandled.stdout.splitlines() == ["avx2 1 avx512f 0"]
    assert unhandled.returncode == -signal.SIGSEGV
