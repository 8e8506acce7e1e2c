/* khost.c: the process side of the shimmed kernel (khost.h), with libc. */
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

/* The kernel's code keeps the stack 8-byte aligned (-mpreferred-stack-boundary=3, as the
 * kernel); libc and the allocators behind malloc assume 16: every entry from the kernel's side
 * realigns. */
#define KHOST_ENTRY __attribute__((force_align_arg_pointer))

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

static void on_sigill(int sig, siginfo_t *info, void *ctx)
{
	ucontext_t *uc = ctx;
	unsigned long ip = (unsigned long)uc->uc_mcontext.gregs[REG_RIP];
	char msg[96];
	(void)sig;
	(void)info;
	if (is_warn_site(ip)) {
		khost_warnings++;
		int n = snprintf(msg, sizeof msg, "[kernel] WARNING at %#lx\n", ip);
		if (write(2, msg, (size_t)n) < 0) { /* nothing more to do */ }
		uc->uc_mcontext.gregs[REG_RIP] += 2; /* past the ud2, as the kernel's trap handler */
		return;
	}
	int n = snprintf(msg, sizeof msg, "[kernel] BUG at %#lx (ud2)\n", ip);
	if (write(2, msg, (size_t)n) < 0) { /* aborting anyway */ }
	abort();
}

KHOST_ENTRY void khost_install_traps(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_sigill;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGILL, &sa, NULL);
}
