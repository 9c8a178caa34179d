/* Preloaded into a process (see avx2_only.sh), makes it see a CPU without AVX-512, AVX-VNNI or AMX: an AVX2 CPU.
 *
 * Libraries pick their kernels by the CPUID instruction (PyTorch's ATen and inductor, MKL, oneDNN, XLA's LLVM code
 * generation and its YNNPACK/XNNPACK products, gcc's -march=native). Linux can make CPUID trap in a process
 * (arch_prctl ARCH_SET_CPUID, on CPUs with CPUID faulting: the `cpuid_fault` flag in /proc/cpuinfo); the trap's
 * handler runs the real CPUID and clears the feature bits of AVX-512, AVX-VNNI, AVX10 and AMX before handing the
 * answer back. Threads and child processes inherit the trap (children through LD_PRELOAD again, as exec clears it).
 * A program that installs a SIGSEGV handler of its own (gcc does) gets it called for every other fault: this file's
 * sigaction() and signal() keep the trap's handler in place and hold theirs behind it.
 * Files that list the features (/proc/cpuinfo) are not changed. The instructions themselves still run: this steers
 * the choice of kernels, it does not forbid them.
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define ARCH_SET_CPUID 0x1012
#define BIT(n) (1u << (n))

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
static struct sigaction theirs; /* the process's own SIGSEGV handler, SIG_DFL until it sets one */

static void cpuid_traps(int traps) { syscall(SYS_arch_prctl, ARCH_SET_CPUID, !traps); }

static sigaction_fn real_sigaction(void) {
    static sigaction_fn real;
    if (!real) real = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    return real;
}

static void pass_on(int sig, siginfo_t *info, void *context) {
    if (theirs.sa_flags & SA_SIGINFO) {
        theirs.sa_sigaction(sig, info, context);
    } else if (theirs.sa_handler != SIG_DFL && theirs.sa_handler != SIG_IGN) {
        theirs.sa_handler(sig);
    } else { /* the default action: the fault repeats on return and ends the process */
        struct sigaction fallback;
        memset(&fallback, 0, sizeof fallback);
        fallback.sa_handler = SIG_DFL;
        real_sigaction()(SIGSEGV, &fallback, NULL);
    }
}

static void on_segv(int sig, siginfo_t *info, void *context) {
    greg_t *regs = ((ucontext_t *)context)->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)regs[REG_RIP];
    /* a trapped CPUID arrives as the kernel's general-protection fault (SI_KERNEL), from readable code; any other
     * fault, an unreadable instruction address among them, is a real one */
    if (info->si_code != SI_KERNEL || ip[0] != 0x0f || ip[1] != 0xa2) {
        pass_on(sig, info, context);
        return;
    }
    unsigned leaf = (unsigned)regs[REG_RAX], sub = (unsigned)regs[REG_RCX], a, b, c, d;
    cpuid_traps(0);
    __cpuid_count(leaf, sub, a, b, c, d);
    cpuid_traps(1);
    if (leaf == 7 && sub == 0) {
        /* AVX512 F, DQ, IFMA, PF, ER, CD, BW, VL; VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ; 4VNNIW, 4FMAPS,
         * VP2INTERSECT, AMX-BF16, AVX512-FP16, AMX-TILE, AMX-INT8 */
        b &= ~(BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31));
        c &= ~(BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14));
        d &= ~(BIT(2) | BIT(3) | BIT(8) | BIT(22) | BIT(23) | BIT(24) | BIT(25));
    } else if (leaf == 7 && sub == 1) {
        a &= ~(BIT(4) | BIT(5) | BIT(21) | BIT(23)); /* AVX-VNNI, AVX512-BF16, AMX-FP16, AVX-IFMA */
        d &= ~BIT(19);                                /* AVX10 */
    } else if (leaf == 0x1d || leaf == 0x1e || leaf == 0x24) { /* AMX tiles, AMX, AVX10 */
        a = b = c = d = 0;
    }
    regs[REG_RAX] = a, regs[REG_RBX] = b, regs[REG_RCX] = c, regs[REG_RDX] = d;
    regs[REG_RIP] += 2; /* past the CPUID instruction */
}

int sigaction(int sig, const struct sigaction *action, struct sigaction *old) {
    if (sig != SIGSEGV) return real_sigaction()(sig, action, old);
    if (old) *old = theirs;
    if (action) theirs = *action;
    return 0;
}

sighandler_t signal(int sig, sighandler_t handler) {
    struct sigaction action, old;
    memset(&action, 0, sizeof action);
    action.sa_handler = handler;
    action.sa_flags = SA_RESTART;
    if (sigaction(sig, &action, &old) != 0) return SIG_ERR;
    return (old.sa_flags & SA_SIGINFO) ? (sighandler_t)old.sa_sigaction : old.sa_handler;
}

__attribute__((constructor)) static void avx2_only(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    theirs.sa_handler = SIG_DFL;
    real_sigaction()(SIGSEGV, &action, NULL);
    if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
        fprintf(stderr, "avx2_only: this CPU or kernel cannot trap CPUID (no cpuid_fault in /proc/cpuinfo)\n");
        exit(3);
    }
}
