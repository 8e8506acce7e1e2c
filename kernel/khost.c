/* khost.c: the process side of the shimmed kernel (khost.h), with libc, for x86-64 and arm64. */
#define _GNU_SOURCE
#include "khost.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

unsigned long khost_warnings;

#if defined(__x86_64__)
/* The kernel's code keeps the stack 8-byte aligned (-mpreferred-stack-boundary=3, as the
 * kernel); libc and the allocators behind malloc assume 16: every entry from the kernel's side
 * realigns. */
#define KHOST_ENTRY __attribute__((force_align_arg_pointer))
#define KHOST_TRAP_SIGNAL SIGILL
#define KHOST_TRAP_NAME "ud2"
#define KHOST_TRAP_BYTES 2
#define khost_trap_pc(uc) ((uc)->uc_mcontext.gregs[REG_RIP])
#elif defined(__aarch64__)
/* arm64 kernel code keeps the stack 16-byte aligned, as userspace does. */
#define KHOST_ENTRY
#define KHOST_TRAP_SIGNAL SIGTRAP
#define KHOST_TRAP_NAME "brk"
#define KHOST_TRAP_BYTES 4
#define khost_trap_pc(uc) ((uc)->uc_mcontext.pc)
#endif

KHOST_ENTRY void *khost_map(unsigned long bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

KHOST_ENTRY void khost_unmap(void *p, unsigned long bytes)
{
	munmap(p, bytes);
}

KHOST_ENTRY void *khost_map_at(unsigned long addr, unsigned long bytes)
{
	void *p = mmap((void *)addr, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (p != (void *)addr) { /* a kernel older than MAP_FIXED_NOREPLACE took it as a hint */
		munmap(p, bytes);
		return NULL;
	}
	return p;
}

KHOST_ENTRY void *khost_malloc(unsigned long bytes)
{
	return malloc(bytes);
}

KHOST_ENTRY void khost_free(void *p)
{
	free(p);
}

KHOST_ENTRY void khost_vlog(const char *fmt, va_list ap)
{
	fputs("[kernel] ", stderr);
	vfprintf(stderr, fmt, ap);
	if (fmt[0] && fmt[strlen(fmt) - 1] != '\n')
		fputc('\n', stderr);
}

KHOST_ENTRY int khost_vformat(char *buf, unsigned long size, const char *fmt, va_list ap)
{
	return vsnprintf(buf, size, fmt, ap);
}

/* The WARN sites (kshim.h's kshim_warn_trap); weak: a build may have none. */
extern const unsigned long __start_kshim_warn_table[] __attribute__((weak));
extern const unsigned long __stop_kshim_warn_table[] __attribute__((weak));

static int is_warn_site(unsigned long ip)
{
	for (const unsigned long *p = __start_kshim_warn_table; p && p < __stop_kshim_warn_table; p++)
		if (*p == ip)
			return 1;
	return 0;
}

static void on_trap(int sig, siginfo_t *info, void *ctx)
{
	ucontext_t *uc = ctx;
	unsigned long ip = (unsigned long)khost_trap_pc(uc);
	char msg[96];
	(void)sig;
	(void)info;
	if (is_warn_site(ip)) {
		khost_warnings++;
		int n = snprintf(msg, sizeof msg, "[kernel] WARNING at %#lx\n", ip);
		if (write(2, msg, (size_t)n) < 0) { /* nothing more to do */ }
		khost_trap_pc(uc) += KHOST_TRAP_BYTES; /* past the trap, as the kernel's handler */
		return;
	}
	int n = snprintf(msg, sizeof msg, "[kernel] BUG at %#lx (" KHOST_TRAP_NAME ")\n", ip);
	if (write(2, msg, (size_t)n) < 0) { /* aborting anyway */ }
	abort();
}

KHOST_ENTRY void khost_install_traps(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(KHOST_TRAP_SIGNAL, &sa, NULL);
}
