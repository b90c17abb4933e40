/* fork-hopper: writes its pid to argv[1], then waits for SIGTERM (which it
   catches and does not die of). From then on each generation forks, the
   child calls setsid, the parent exits, in bursts of 20 generations 10 ms
   apart. Bounded in its own code so that an escaped one ends by itself: at
   most 2000 generations and 5 s of hopping from the SIGTERM, and 60 s of
   waiting for it. The two bounds are apart so that the wait never ends on
   its own while a test on a loaded machine is still on its way to stop it
   (a hopper that ended by itself after 5 s of waiting made its command
   exit 0 before a release --force came). */
#include <unistd.h>
#include <stdio.h>
#include <signal.h>
#include <time.h>
static volatile sig_atomic_t go;
static void on_term(int s) { (void)s; go = 1; }
static long since(const struct timespec *a) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long)(t.tv_sec - a->tv_sec);
}
int main(int argc, char **argv) {
	struct timespec t0, hop0, pause = {0, 10000000};
	int hopping = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	signal(SIGTERM, on_term);
	if (argc > 1) { FILE *f = fopen(argv[1], "w"); if (f) { fprintf(f, "%d\n", getpid()); fclose(f); } }
	for (int gen = 0; gen < 2000;) {
		if (!go) {
			if (since(&t0) >= 60) _exit(0);
			nanosleep(&pause, NULL);
			continue;
		}
		if (!hopping) { /* inherited by every later generation */
			clock_gettime(CLOCK_MONOTONIC, &hop0);
			hopping = 1;
		}
		if (since(&hop0) >= 5) _exit(0);
		if (gen % 20 == 19) nanosleep(&pause, NULL);
		pid_t c = fork();
		if (c < 0) _exit(1);
		if (c > 0) _exit(0);
		setsid();
		gen++;
	}
	_exit(0);
}
