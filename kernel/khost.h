/*
 * khost.h: what the shimmed "kernel" (kservices.c, compiled with the kernel's flags and without
 * libc's headers) asks of the process: memory, output and the trap handler. khost.c implements
 * it with libc, compiled with ordinary flags.
 */
#ifndef KHOST_H
#define KHOST_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* bytes of zeroed memory aligned to 4 KiB, or NULL */
void *khost_map(unsigned long bytes);
void khost_unmap(void *p, unsigned long bytes);
/* bytes of zeroed memory at exactly addr (4 KiB aligned), or NULL when that range is taken */
void *khost_map_at(unsigned long addr, unsigned long bytes);
void *khost_malloc(unsigned long bytes);
void khost_free(void *p);
void khost_vlog(const char *fmt, va_list ap);
int khost_vformat(char *buf, unsigned long size, const char *fmt, va_list ap);
/* Installs the handler that turns a BUG() trap (x86-64: ud2, SIGILL; arm64: brk, SIGTRAP) into
 * an abort with its address and resumes after a WARN() trap (the sites kshim.h records in the
 * kshim_warn_table section). */
void khost_install_traps(void);
/* WARN() traps taken so far. */
extern unsigned long khost_warnings;

#ifdef __cplusplus
}
#endif

#endif
