/*
 * region_preload_adversary: one case a run of what ordinary memory gives a program and the
 * preload library once broke (issue 55), checked the same way with the library and without it:
 * the verdict must not depend on it. Each case allocates more than the small budget the test
 * gives (tools/tests/region_preload_adversary.sh), so that pages leave memory meanwhile.
 *
 *   region_preload_adversary CASE
 *
 *   madvise     the kernel's checks: unaligned madvise/munmap and MADV_REMOVE on private memory
 *               are EINVAL and change no byte; DONTNEED of one page zeroes that page alone
 *   wipeonfork  a child reads zeros in a MADV_WIPEONFORK mapping; the parent keeps its bytes
 *   dontfork    a child's touch of a MADV_DONTFORK mapping is SIGSEGV
 *   locks       POSIX semaphores, a mutex and a condition variable in large blocks, ping-ponged
 *               by two threads while a third churns memory (futex words evicted in between)
 *   signals     SIGBUS handlers installed by __sysv_signal, sysv_signal, bsd_signal, sigset,
 *               signal and syscall(SYS_rt_sigaction) while memory churns; a raised SIGBUS still
 *               reaches the program's handler; sighold(SIGBUS) and sigprocmask block nothing
 *               that would kill it; siginterrupt() still decides signal()'s SA_RESTART; a raw
 *               rt_sigprocmask with a wrong set size is EINVAL
 *   stack       a thread on a 256 KiB malloc'd stack and one given by pthread_attr_setstack,
 *               recursing through it while memory churns
 *   io          read, pread, preadv2, preadv64, recvmmsg, getrandom into fresh large buffers
 *               (the _chk forms where _FORTIFY_SOURCE makes them), pwritev, pwritev2 and write
 *               from them: full counts, every byte right; a 4 MiB read at once
 *   kernel-args struct stat into the fresh tail of a grown array; paths in a large block
 *   kernel-writes what the kernel writes into large blocks, and only that: poll's revents after
 *               a timeout, epoll_wait's events and no byte past them, nothing from an accept
 *               that fails; a signal handled on a sigaltstack in a large block
 *   pthread-exit main ends by pthread_exit while a worker churns and prints
 *   fork-threads fork() while three threads churn: each child reads its copy and exits
 * Prints "CASE: ok" and exits 0, or names the first check that failed and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define PAGE ((size_t)4096)

static int failed(const char *what) {
	printf("FAILED: %s (errno %d: %s)\n", what, errno, strerror(errno));
	fflush(stdout);
	return 1;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(seed * 131 + i * 7 + i / 4096);
}

static int same(const unsigned char *p, size_t n, unsigned seed) {
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(seed * 131 + i * 7 + i / 4096))
			return 0;
	return 1;
}

/* Writes and reads 48 MiB in 1 MiB blocks, so that what the others hold leaves memory. */
static volatile int churning = 1;
static void *churn(void *arg) {
	(void)arg;
	unsigned char *b[48];
	for (unsigned round = 0; churning; round++) {
		for (int i = 0; i < 48; i++) {
			b[i] = malloc(MIB);
			if (b[i] == NULL)
				return NULL;
			fill(b[i], MIB, round + i);
		}
		for (int i = 0; i < 48; i++) {
			if (!same(b[i], MIB, round + i)) {
				printf("FAILED: churned block changed\n");
				exit(1);
			}
			free(b[i]);
		}
	}
	return NULL;
}

static pthread_t start_churn(void) {
	pthread_t t;
	churning = 1;
	pthread_create(&t, NULL, churn, NULL);
	return t;
}

static void stop_churn(pthread_t t) {
	churning = 0;
	pthread_join(t, NULL);
}

/* --- madvise ------------------------------------------------------------------------------ */

static int case_madvise(void) {
	unsigned char *a = malloc(200000), *b = malloc(200000);
	unsigned char *m = mmap(NULL, MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a == NULL || b == NULL || m == MAP_FAILED)
		return failed("allocating");
	fill(a, 200000, 1);
	fill(b, 200000, 2);
	fill(m, MIB, 3);
	unsigned char *odd = ((uintptr_t)a % PAGE == 0) ? a + 16 : a;
	if (madvise(odd, 1000, MADV_DONTNEED) != -1 || errno != EINVAL)
		return failed("madvise of an unaligned block is not EINVAL");
	if (madvise(m + 100, PAGE, MADV_DONTNEED) != -1 || errno != EINVAL)
		return failed("madvise of an unaligned mapping is not EINVAL");
	if (madvise(m, PAGE, MADV_REMOVE) != -1 || errno != EINVAL)
		return failed("MADV_REMOVE on private memory is not EINVAL");
	if (munmap(m + 100, PAGE) != -1 || errno != EINVAL)
		return failed("munmap unaligned is not EINVAL");
	if (munmap(m, 0) != -1 || errno != EINVAL)
		return failed("munmap of 0 bytes is not EINVAL");
	if (!same(a, 200000, 1) || !same(b, 200000, 2) || !same(m, MIB, 3))
		return failed("a refused call changed bytes");
	if (madvise(m + 8 * PAGE, 1000, MADV_DONTNEED) != 0)
		return failed("madvise DONTNEED of one page");
	for (size_t i = 0; i < PAGE; i++)
		if (m[8 * PAGE + i] != 0)
			return failed("the page advised DONTNEED is not zeros");
	if (!same(m, 8 * PAGE, 3))
		return failed("DONTNEED changed the pages before");
	for (size_t i = 9 * PAGE; i < MIB; i++)
		if (m[i] != (unsigned char)(3 * 131 + i * 7 + i / 4096))
			return failed("DONTNEED changed the pages after");
	if (munmap(m + 16 * PAGE, 16 * PAGE) != 0 || !same(m, 8 * PAGE, 3))
		return failed("munmap of a part");
	return 0;
}

/* --- fork advice -------------------------------------------------------------------------- */

static int child_status(pid_t pid) {
	int status = 0;
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return status;
}

static int case_wipeonfork(void) {
	unsigned char *m = mmap(NULL, MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return failed("mmap");
	fill(m, MIB, 4);
	if (madvise(m, MIB, MADV_WIPEONFORK) != 0)
		return failed("MADV_WIPEONFORK");
	pthread_t t = start_churn();
	usleep(100000);
	pid_t pid = fork();
	if (pid == 0) {
		for (size_t i = 0; i < MIB; i++)
			if (m[i] != 0)
				_exit(3);
		_exit(0);
	}
	int status = child_status(pid);
	stop_churn(t);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return failed("the child of a WIPEONFORK mapping read its parent's bytes");
	if (!same(m, MIB, 4))
		return failed("the parent lost its bytes");
	return 0;
}

static int case_dontfork(void) {
	unsigned char *m = mmap(NULL, MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return failed("mmap");
	fill(m, MIB, 5);
	if (madvise(m, MIB, MADV_DONTFORK) != 0)
		return failed("MADV_DONTFORK");
	pid_t pid = fork();
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		volatile unsigned char c = m[12345];
		_exit(c == 77 ? 3 : 4);
	}
	int status = child_status(pid);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSEGV)
		return failed("the child of a DONTFORK mapping could touch it");
	if (!same(m, MIB, 5))
		return failed("the parent lost its bytes");
	return 0;
}

/* --- locks -------------------------------------------------------------------------------- */

struct pingpong {
	sem_t ping, pong;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	int turn;
};
static struct pingpong *pp;
enum { kRounds = 20000 };

static void *ponger(void *arg) {
	(void)arg;
	for (int i = 0; i < kRounds; i++) {
		if (sem_wait(&pp->ping) != 0)
			exit(failed("sem_wait"));
		sem_post(&pp->pong);
		pthread_mutex_lock(&pp->mutex);
		while (pp->turn != 1)
			pthread_cond_wait(&pp->cond, &pp->mutex);
		pp->turn = 0;
		pthread_cond_signal(&pp->cond);
		pthread_mutex_unlock(&pp->mutex);
	}
	return NULL;
}

static int case_locks(void) {
	unsigned char *block = malloc(2 * MIB);  /* large: region memory in every mode */
	if (block == NULL)
		return failed("malloc");
	pp = (struct pingpong *)(block + MIB + 100);
	memset(pp, 0, sizeof *pp);
	sem_init(&pp->ping, 0, 0);
	sem_init(&pp->pong, 0, 0);
	pthread_mutex_init(&pp->mutex, NULL);
	pthread_cond_init(&pp->cond, NULL);
	pthread_t churner = start_churn(), t;
	pthread_create(&t, NULL, ponger, NULL);
	for (int i = 0; i < kRounds; i++) {
		sem_post(&pp->ping);
		if (sem_wait(&pp->pong) != 0)
			return failed("sem_wait");
		pthread_mutex_lock(&pp->mutex);
		pp->turn = 1;
		pthread_cond_signal(&pp->cond);
		while (pp->turn != 0)
			pthread_cond_wait(&pp->cond, &pp->mutex);
		pthread_mutex_unlock(&pp->mutex);
	}
	pthread_join(t, NULL);
	stop_churn(churner);
	return 0;
}

/* --- signals ------------------------------------------------------------------------------ */

static volatile sig_atomic_t caught;
static void on_bus(int sig) {
	(void)sig;
	caught++;
}

typedef void (*handler_t)(int);
extern handler_t __sysv_signal(int, handler_t);
extern handler_t sysv_signal(int, handler_t);
extern handler_t bsd_signal(int, handler_t);

static int touch_churn(void) {
	pthread_t t = start_churn();
	unsigned char *m = malloc(8 * MIB);
	if (m == NULL)
		return 1;
	for (int r = 0; r < 3; r++) {
		fill(m, 8 * MIB, 6 + r);
		if (!same(m, 8 * MIB, 6 + r))
			return 1;
	}
	free(m);
	stop_churn(t);
	return 0;
}

struct kernel_sigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	uint64_t mask;
};

static int case_signals(void) {
	const char *how[] = {"__sysv_signal", "sysv_signal", "bsd_signal", "sigset", "signal", "rt_sigaction"};
	for (int i = 0; i < 6; i++) {
		caught = 0;
		switch (i) {
		case 0: __sysv_signal(SIGBUS, on_bus); break;
		case 1: sysv_signal(SIGBUS, on_bus); break;
		case 2: bsd_signal(SIGBUS, on_bus); break;
		case 3: sigset(SIGBUS, on_bus); break;
		case 4: signal(SIGBUS, on_bus); break;
		case 5: {  /* libc's restorer, read back from a handler libc installed */
			struct kernel_sigaction k;
			signal(SIGUSR1, on_bus);
			if (syscall(SYS_rt_sigaction, SIGUSR1, NULL, &k, 8) != 0)
				return failed("rt_sigaction (query)");
			k.handler = on_bus;
			k.mask = 0;
			if (syscall(SYS_rt_sigaction, SIGBUS, &k, NULL, 8) != 0)
				return failed("rt_sigaction");
			break;
		}
		}
		sigset_t bus;
		sigemptyset(&bus);
		sigaddset(&bus, SIGBUS);
		sighold(SIGBUS);
		sigprocmask(SIG_BLOCK, &bus, NULL);
		if (touch_churn() != 0) {
			printf("FAILED: memory under %s\n", how[i]);
			return 1;
		}
		sigprocmask(SIG_UNBLOCK, &bus, NULL);
		sigrelse(SIGBUS);
		raise(SIGBUS);
		if (caught != 1) {
			printf("FAILED: the handler installed by %s did not see a raised SIGBUS (%d)\n", how[i], (int)caught);
			return 1;
		}
	}
	/* siginterrupt() chooses what a later signal() installs: no SA_RESTART */
	struct sigaction now;
	siginterrupt(SIGUSR2, 1);
	signal(SIGUSR2, on_bus);
	if (sigaction(SIGUSR2, NULL, &now) != 0 || (now.sa_flags & SA_RESTART) != 0)
		return failed("signal() after siginterrupt(sig, 1) restarts calls");
	/* a raw rt_sigprocmask with a set size the kernel refuses is refused */
	uint64_t none = 0;
	errno = 0;
	if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, &none, NULL, 4) != -1 || errno != EINVAL)
		return failed("rt_sigprocmask with a 4-byte set was not EINVAL");
	return 0;
}

/* --- stacks ------------------------------------------------------------------------------- */

static unsigned long recurse(unsigned depth) {
	volatile unsigned char frame[1024];
	for (unsigned i = 0; i < sizeof frame; i++)
		frame[i] = (unsigned char)(depth + i);
	if (depth == 0)
		return frame[17];
	return recurse(depth - 1) + frame[depth % sizeof frame];
}

static void *deep(void *arg) {
	unsigned long *out = arg;
	for (int r = 0; r < 50; r++)
		*out += recurse(150);
	return NULL;
}

static int case_stack(void) {
	pthread_t churner = start_churn();
	for (int kind = 0; kind < 2; kind++) {
		size_t size = 256 << 10;
		void *stack = kind == 0 ? malloc(size) : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (stack == NULL || stack == MAP_FAILED)
			return failed("allocating a stack");
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setstack(&attr, stack, size);
		pthread_t t;
		unsigned long sum = 0, want = 0;
		if (pthread_create(&t, &attr, deep, &sum) != 0)
			return failed("pthread_create on a given stack");
		pthread_join(t, NULL);
		deep(&want);
		if (sum != want)
			return failed("the thread's sums on a given stack differ");
	}
	stop_churn(churner);
	return 0;
}

/* --- io ----------------------------------------------------------------------------------- */

extern ssize_t __read_chk(int, void *, size_t, size_t);
extern ssize_t __pread64_chk(int, void *, size_t, off_t, size_t);

static int case_io(void) {
	char path[] = "/tmp/zsm-adversary-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return failed("mkstemp");
	unlink(path);
	size_t n = 4 * MIB;
	unsigned char *src = malloc(n), *dst = malloc(n), *dst2 = malloc(n);
	if (src == NULL || dst == NULL || dst2 == NULL)
		return failed("malloc");
	fill(src, n, 9);
	pthread_t churner = start_churn();
	if (write(fd, src, n) != (ssize_t)n)
		return failed("write of 4 MiB");
	if (pread(fd, dst, n, 0) != (ssize_t)n || !same(dst, n, 9))
		return failed("pread of 4 MiB");
	memset(dst, 0, n);
	lseek(fd, 0, SEEK_SET);
	if (read(fd, dst, n) != (ssize_t)n || !same(dst, n, 9))
		return failed("read of 4 MiB at once");
	memset(dst, 0, n);
	lseek(fd, 0, SEEK_SET);  /* what a _FORTIFY_SOURCE build calls for read and pread */
	if (__read_chk(fd, dst, n, n) != (ssize_t)n || !same(dst, n, 9))
		return failed("__read_chk of 4 MiB");
	memset(dst, 0, n);
	if (__pread64_chk(fd, dst, n, 0, n) != (ssize_t)n || !same(dst, n, 9))
		return failed("__pread64_chk of 4 MiB");
	struct iovec v[2] = {{dst, n / 2}, {dst2, n / 2}};
	memset(dst, 0, n);
	if (preadv2(fd, v, 2, 0, 0) != (ssize_t)n || !same(dst, n / 2, 9))
		return failed("preadv2");
	if (preadv64(fd, v, 2, 0) != (ssize_t)n)
		return failed("preadv64");
	struct iovec w[2] = {{src, n / 2}, {src + n / 2, n / 2}};
	if (pwritev(fd, w, 2, 0) != (ssize_t)n || pwritev2(fd, w, 2, 0, 0) != (ssize_t)n)
		return failed("pwritev, pwritev2");
	if (getrandom(dst2, n, 0) != (ssize_t)n)
		return failed("getrandom of 4 MiB");
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0)
		return failed("socketpair");
	for (int i = 0; i < 4; i++)
		if (send(sv[0], src + i * 60000, 60000, 0) != 60000)
			return failed("send of a datagram");
	struct mmsghdr msgs[4];
	struct iovec mv[4];
	memset(msgs, 0, sizeof msgs);
	for (int i = 0; i < 4; i++) {
		mv[i].iov_base = dst + i * 60000;
		mv[i].iov_len = 60000;
		msgs[i].msg_hdr.msg_iov = &mv[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	int got = 0;
	while (got < 4) {
		int r = recvmmsg(sv[1], msgs + got, 4 - got, 0, NULL);
		if (r <= 0)
			return failed("recvmmsg");
		for (int i = got; i < got + r; i++)
			if (msgs[i].msg_len != 60000)
				return failed("recvmmsg cut a datagram");
		got += r;
	}
	if (!same(dst, 4 * 60000, 9))
		return failed("recvmmsg's bytes");
	stop_churn(churner);
	close(fd);
	return 0;
}

/* --- kernel arguments -------------------------------------------------------------------- */

static int case_kernel_args(void) {
	pthread_t churner = start_churn();
	struct stat *st = NULL;
	size_t have = 0;
	for (size_t i = 0; i < 3000; i++) {
		if (i == have) {
			have = have ? have * 2 : 256;
			st = realloc(st, have * sizeof *st);
			if (st == NULL)
				return failed("realloc");
		}
		if (stat("/", &st[i]) != 0)
			return failed("stat into a grown array");
	}
	char *paths = malloc(MIB);
	if (paths == NULL)
		return failed("malloc");
	for (int r = 0; r < 2000; r++) {
		char *p = paths + (r * 4099) % (MIB - 64);
		strcpy(p, r % 2 ? "/proc/self/status" : "/dev/null");
		int fd = open(p, O_RDONLY);
		if (fd < 0)
			return failed("open of a path in a large block");
		close(fd);
		if (access(p, R_OK) != 0)
			return failed("access of a path in a large block");
	}
	stop_churn(churner);
	return 0;
}

/* --- what the kernel writes ----------------------------------------------------------------- */

static int all_bytes(const unsigned char *p, size_t n, unsigned char v) {
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

static int poll_after_timeout(int empty_pipe) {
	struct pollfd *fds = malloc(MIB);
	if (fds == NULL)
		return failed("malloc");
	for (int r = 0; r < 200; r++) {
		for (int i = 0; i < 64; i++)
			fds[i] = (struct pollfd){.fd = empty_pipe, .events = POLLIN, .revents = 0x5a5a};
		if (poll(fds, 64, 0) != 0)
			return failed("poll of an empty pipe");
		for (int i = 0; i < 64; i++)
			if (fds[i].revents != 0)
				return failed("poll left a stale revents after a timeout");
	}
	free(fds);
	return 0;
}

static int epoll_events_only(int ready_pipe) {
	int ep = epoll_create1(0);
	struct epoll_event e = {.events = EPOLLIN, .data.u64 = 7};
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ready_pipe, &e) != 0)
		return failed("epoll_create1, epoll_ctl");
	unsigned char *events = malloc(MIB);
	if (events == NULL)
		return failed("malloc");
	for (int r = 0; r < 200; r++) {
		memset(events, 0xa5, MIB);
		int most = (int)(MIB / sizeof(struct epoll_event));
		if (epoll_wait(ep, (struct epoll_event *)events, most, 0) != 1 ||
		    ((struct epoll_event *)events)->data.u64 != 7)
			return failed("epoll_wait of a ready pipe");
		if (!all_bytes(events + sizeof(struct epoll_event), MIB - sizeof(struct epoll_event), 0xa5))
			return failed("epoll_wait wrote past its events");
	}
	free(events);
	close(ep);
	return 0;
}

static int failed_accept_writes_nothing(void) {
	int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_un_any {
		sa_family_t family;
	} any = {AF_UNIX};
	if (ls < 0 || bind(ls, (struct sockaddr *)&any, sizeof any) != 0 || listen(ls, 1) != 0)
		return failed("socket, bind (an abstract name), listen");
	unsigned char *block = malloc(MIB);
	if (block == NULL)
		return failed("malloc");
	struct sockaddr_storage *addr = (struct sockaddr_storage *)block;
	socklen_t *len = (socklen_t *)(block + 3 * PAGE);
	for (int r = 0; r < 200; r++) {
		memset(addr, 0x3c, sizeof *addr);
		*len = sizeof *addr;
		if (accept(ls, (struct sockaddr *)addr, len) != -1 || errno != EAGAIN)
			return failed("accept with no connection is not EAGAIN");
		if (*len != sizeof *addr || !all_bytes(block, sizeof *addr, 0x3c))
			return failed("an accept that failed wrote its address");
	}
	free(block);
	close(ls);
	return 0;
}

static unsigned char *alt_stack;
static const size_t alt_size = 256 << 10;
static volatile sig_atomic_t on_alt_stack, handled;
static void note_stack(int sig) {
	unsigned char here;
	(void)sig;
	on_alt_stack += &here >= alt_stack && &here < alt_stack + alt_size;
	handled++;
}

static int signals_on_a_large_block(void) {
	alt_stack = malloc(MIB);
	if (alt_stack == NULL)
		return failed("malloc");
	stack_t ss = {.ss_sp = alt_stack, .ss_size = alt_size}, off = {.ss_flags = SS_DISABLE};
	struct sigaction sa = {.sa_handler = note_stack, .sa_flags = SA_ONSTACK};
	sigemptyset(&sa.sa_mask);
	if (sigaltstack(&ss, NULL) != 0 || sigaction(SIGUSR1, &sa, NULL) != 0)
		return failed("sigaltstack, sigaction");
	for (int r = 0; r < 300; r++) {
		raise(SIGUSR1);
		if (r % 50 == 0)
			usleep(10000);
	}
	if (handled != 300 || on_alt_stack != 300)
		return failed("a signal not handled on its sigaltstack");
	if (sigaltstack(&off, NULL) != 0)
		return failed("sigaltstack(SS_DISABLE)");
	free(alt_stack);
	return 0;
}

static int case_kernel_writes(void) {
	int p[2];
	if (pipe(p) != 0)
		return failed("pipe");
	pthread_t churner = start_churn();
	if (poll_after_timeout(p[0]) != 0)
		return 1;
	if (write(p[1], "x", 1) != 1)
		return failed("write to a pipe");
	if (epoll_events_only(p[0]) != 0 || failed_accept_writes_nothing() != 0 || signals_on_a_large_block() != 0)
		return 1;
	stop_churn(churner);
	return 0;
}

/* --- processes ---------------------------------------------------------------------------- */

static void *printer(void *arg) {
	(void)arg;
	pthread_t t = start_churn();
	usleep(200000);
	stop_churn(t);
	printf("pthread-exit: ok\n");  /* buffered: exit's flush prints it */
	return NULL;
}

static int case_pthread_exit(void) {
	pthread_t t;
	pthread_create(&t, NULL, printer, NULL);
	pthread_exit(NULL);
}

static int case_fork_threads(void) {
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, churn, NULL);
	unsigned char *mine = malloc(4 * MIB);
	if (mine == NULL)
		return failed("malloc");
	fill(mine, 4 * MIB, 11);
	for (int c = 0; c < 6; c++) {
		usleep(30000);
		pid_t pid = fork();
		if (pid == 0)
			_exit(same(mine, 4 * MIB, 11) ? 0 : 3);
		int status = child_status(pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			return failed("a child of fork() from a threaded parent");
	}
	churning = 0;
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	return 0;
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 2) {
		fprintf(stderr, "usage: region_preload_adversary CASE\n");
		return 2;
	}
	static const struct {
		const char *name;
		int (*run)(void);
	} cases[] = {
		{"madvise", case_madvise}, {"wipeonfork", case_wipeonfork}, {"dontfork", case_dontfork},
		{"locks", case_locks}, {"signals", case_signals}, {"stack", case_stack}, {"io", case_io},
		{"kernel-args", case_kernel_args}, {"kernel-writes", case_kernel_writes},
		{"pthread-exit", case_pthread_exit},
		{"fork-threads", case_fork_threads},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (strcmp(argv[1], cases[i].name) != 0)
			continue;
		if (strcmp(argv[1], "pthread-exit") == 0)
			setvbuf(stdout, NULL, _IOFBF, 0);
		int rc = cases[i].run();
		if (rc == 0)
			printf("%s: ok\n", argv[1]);
		return rc;
	}
	fprintf(stderr, "region_preload_adversary: unknown case '%s'\n", argv[1]);
	return 2;
}
