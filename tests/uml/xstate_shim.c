/* LD_PRELOAD shim for User-Mode Linux 6.1 (Debian 12's linux.uml) on hosts whose
 * XSAVE area is bigger than UML's fixed 2696-byte buffer (AMX: 11008 bytes).
 * The host kernel's PTRACE_SETREGSET(NT_X86_XSTATE) wants exactly
 * fpu_user_cfg.max_size bytes (else EFAULT); a shorter GETREGSET is merely truncated.
 * So a short SETREGSET is completed here: read the task's whole current state,
 * lay UML's bytes over its start, write the whole buffer back. UML guests never
 * get AMX permission, so the tail (tile config/data) is the task's own, unused state. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/uio.h>

#define NT_X86_XSTATE_ 0x202
#define BIG (64 * 1024)

typedef long (*ptrace_fn)(enum __ptrace_request, ...);
static ptrace_fn real;
static size_t host_size;   /* the host's whole XSAVE (standard format) size */
static size_t force_len;   /* test knob: treat callers' buffers as this short */
static unsigned char big[BIG] __attribute__((aligned(64)));

long ptrace(enum __ptrace_request req, ...)
{
	va_list ap;
	va_start(ap, req);
	pid_t pid = va_arg(ap, pid_t);
	void *addr = va_arg(ap, void *);
	void *data = va_arg(ap, void *);
	va_end(ap);
	if (!real) {
		real = (ptrace_fn)dlsym(RTLD_NEXT, "ptrace");
		const char *f = getenv("XSTATE_SHIM_FORCE_LEN");
		force_len = f ? strtoul(f, NULL, 0) : 0;
	}
	if (req == PTRACE_SETREGSET && (unsigned long)addr == NT_X86_XSTATE_) {
		struct iovec *iov = data, whole = { big, BIG };
		size_t len = iov->iov_len;
		if (force_len && force_len < len)
			len = force_len;
		if (!host_size || len < host_size) {
			if (real(PTRACE_GETREGSET, pid, addr, &whole) < 0)
				return -1;
			host_size = whole.iov_len;
		}
		if (len < host_size) {
			memcpy(big, iov->iov_base, len);
			whole.iov_len = host_size;
			return real(PTRACE_SETREGSET, pid, addr, &whole);
		}
	}
	return real(req, pid, addr, data);
}
