/*
 * stamp appends the time it started, CLOCK_MONOTONIC in nanoseconds, as one
 * decimal line to the file named by its only argument (created 0600 if
 * missing, opened O_APPEND so concurrent stamps never interleave a line).
 *
 * It exists because the handoff figure (P2) is the gap between two moments
 * taken by two processes: the holder's command exiting and the next waiter's
 * command starting. Each moment must cost next to nothing to take, so this is
 * a static C program doing one clock read, one open and one write: it starts
 * in well under a millisecond, unlike date(1), a shell or a Go binary.
 *
 * Built with -DSTAMP_NOLIBC -nostdlib on x86_64 and aarch64 it makes its
 * system calls itself: static glibc's start-up (relocations, TLS, tunables)
 * costs a few hundred microseconds more per exec on small virtual machines,
 * which would land in every handoff figure. Elsewhere, or if that build
 * fails, the harness builds it against libc, static if it can.
 *
 * The clock is read first, before argument checks or I/O, so "started" means
 * as soon as this program ran at all. Used as the holder's last command (exec
 * from sh), the stamp precedes the real exit by one open and one write, a few
 * microseconds, and the same for every tool the harness compares.
 */
#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>

#if defined(STAMP_NOLIBC) && (defined(__x86_64__) || defined(__aarch64__))

static long sys4(long n, long a, long b, long c, long d)
{
#if defined(__x86_64__)
	long r;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
			 : "rcx", "r11", "memory");
	return r;
#else
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	__asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
	return x0;
#endif
}

/* Each returns -errno on failure, as the kernel does. */
static long now(struct timespec *ts) { return sys4(SYS_clock_gettime, CLOCK_MONOTONIC, (long)ts, 0, 0); }
static long open_append(const char *path) { return sys4(SYS_openat, AT_FDCWD, (long)path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600); }
static long put(long fd, const char *b, long n) { return sys4(SYS_write, fd, (long)b, n, 0); }
static long shut(long fd) { return sys4(SYS_close, fd, 0, 0, 0); }

static int stamp(int argc, char **argv);

__attribute__((used)) static void start(long *sp)
{
	int code = stamp((int)sp[0], (char **)(sp + 1));
	sys4(SYS_exit_group, code, 0, 0, 0);
	for (;;)
		;
}

#if defined(__x86_64__)
__asm__(".text\n.global _start\n_start:\n"
	"	xor %rbp, %rbp\n"
	"	mov %rsp, %rdi\n"
	"	and $-16, %rsp\n"
	"	call start\n");
#else
__asm__(".text\n.global _start\n_start:\n"
	"	mov x29, #0\n"
	"	mov x0, sp\n"
	"	bl start\n");
#endif

#else /* libc */

#include <errno.h>
#include <unistd.h>

static long now(struct timespec *ts) { return clock_gettime(CLOCK_MONOTONIC, ts) == 0 ? 0 : -errno; }
static long open_append(const char *path)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	return fd >= 0 ? fd : -errno;
}
static long put(long fd, const char *b, long n)
{
	long w = write((int)fd, b, (size_t)n);
	return w >= 0 ? w : -errno;
}
static long shut(long fd) { return close((int)fd) == 0 ? 0 : -errno; }

static int stamp(int argc, char **argv);

int main(int argc, char **argv) { return stamp(argc, argv); }

#endif

static long length(const char *s)
{
	long n = 0;
	while (s[n] != '\0')
		n++;
	return n;
}

/* fail says "stamp: WHAT: errno N" on stderr and returns 1. */
static int fail(const char *what, long err)
{
	char num[24];
	int i = sizeof num;
	unsigned long e = (unsigned long)-err;
	do {
		num[--i] = (char)('0' + e % 10);
		e /= 10;
	} while (e != 0);
	put(2, "stamp: ", 7);
	put(2, what, length(what));
	put(2, ": errno ", 8);
	put(2, num + i, (long)sizeof num - i);
	put(2, "\n", 1);
	return 1;
}

static int stamp(int argc, char **argv)
{
	struct timespec ts;
	long err = now(&ts);
	if (err < 0)
		return fail("clock_gettime", err);
	if (argc != 2) {
		put(2, "usage: stamp FILE\n", 18);
		return 2;
	}

	unsigned long long ns = (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
	char buf[24];
	int i = sizeof buf;
	buf[--i] = '\n';
	do {
		buf[--i] = (char)('0' + ns % 10);
		ns /= 10;
	} while (ns != 0);

	long fd = open_append(argv[1]);
	if (fd < 0)
		return fail(argv[1], fd);
	long n = put(fd, buf + i, (long)sizeof buf - i);
	if (n != (long)sizeof buf - i)
		return fail(argv[1], n < 0 ? n : -5 /* EIO: short write */);
	if ((err = shut(fd)) < 0)
		return fail(argv[1], err);
	return 0;
}
