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
 *
 * With a second argument NS, stamp is a short job of known length (the
 * semaphore throughput, M1): it sleeps until NS nanoseconds after its start
 * (clock_nanosleep, TIMER_ABSTIME), reads the clock again and appends one
 * line "START END". One write of under 50 bytes to an O_APPEND file, so the
 * lines of many jobs at once never mix.
 */
#include <errno.h>
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
static long doze(const struct timespec *until) { return sys4(SYS_clock_nanosleep, CLOCK_MONOTONIC, TIMER_ABSTIME, (long)until, 0); }
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
static long doze(const struct timespec *until) { return -(long)clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, until, 0); }

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

/* decimal writes n in decimal ending just before end, returns where it starts. */
static char *decimal(char *end, unsigned long long n)
{
	do {
		*--end = (char)('0' + n % 10);
		n /= 10;
	} while (n != 0);
	return end;
}

/* fail says "stamp: WHAT: errno N" on stderr and returns 1. */
static int fail(const char *what, long err)
{
	char num[24];
	char *from = decimal(num + sizeof num, (unsigned long long)-err);
	put(2, "stamp: ", 7);
	put(2, what, length(what));
	put(2, ": errno ", 8);
	put(2, from, (long)(num + sizeof num - from));
	put(2, "\n", 1);
	return 1;
}

static unsigned long long nanos(const struct timespec *ts)
{
	return (unsigned long long)ts->tv_sec * 1000000000ULL + (unsigned long long)ts->tv_nsec;
}

/* nanoseconds parses a count of nanoseconds; -1 if s is not one. */
static long long nanoseconds(const char *s)
{
	long long n = 0;
	if (*s == '\0')
		return -1;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9' || n > 100000000000LL)
			return -1;
		n = n * 10 + (*s - '0');
	}
	return n;
}

static int stamp(int argc, char **argv)
{
	struct timespec ts;
	long err = now(&ts);
	if (err < 0)
		return fail("clock_gettime", err);
	long long sleep = argc == 3 ? nanoseconds(argv[2]) : 0;
	if ((argc != 2 && argc != 3) || sleep < 0) {
		put(2, "usage: stamp FILE [NS]\n", 23);
		return 2;
	}

	unsigned long long start = nanos(&ts);
	char buf[48];
	char *from = buf + sizeof buf;
	*--from = '\n';
	if (argc == 3) {
		unsigned long long until = start + (unsigned long long)sleep;
		ts.tv_sec = (time_t)(until / 1000000000ULL);
		ts.tv_nsec = (long)(until % 1000000000ULL);
		while ((err = doze(&ts)) == -EINTR)
			;
		if (err < 0)
			return fail("clock_nanosleep", err);
		if ((err = now(&ts)) < 0)
			return fail("clock_gettime", err);
		from = decimal(from, nanos(&ts));
		*--from = ' ';
	}
	from = decimal(from, start);

	long fd = open_append(argv[1]);
	if (fd < 0)
		return fail(argv[1], fd);
	long n = put(fd, from, (long)(buf + sizeof buf - from));
	if (n != (long)(buf + sizeof buf - from))
		return fail(argv[1], n < 0 ? n : -5 /* EIO: short write */);
	if ((err = shut(fd)) < 0)
		return fail(argv[1], err);
	return 0;
}
