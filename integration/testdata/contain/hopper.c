/* fork-hopper: writes its pid to argv[1], then waits for SIGTERM (which it
   catches and does not die of). From then on each generation forks, the
   child calls setsid, the parent exits, in bursts of 20 generations 10 ms
   apart. Bounded in its own code so that an escaped one ends by itself: at
   most 2000 generations, and 5 s from its start. */
#include <unistd.h>
#include <stdio.h>
#include <signal.h>
#include <time.h>
static volatile sig_atomic_t go;
static void on_term(int s) { (void)s; go = 1; }
int main(int argc, char **argv) {
	struct timespec t0, t, pause = {0, 10000000};
	clock_gettime(CLOCK_MONOTONIC, &t0);
	signal(SIGTERM, on_term);
	if (argc > 1) { FILE *f = fopen(argv[1], "w"); if (f) { fprintf(f, "%d\n", getpid()); fclose(f); } }
	for (int gen = 0; gen < 2000;) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec >= 5) _exit(0);
		if (!go || gen % 20 == 19) nanosleep(&pause, NULL);
		if (!go) continue;
		pid_t c = fork();
		if (c < 0) _exit(1);
		if (c > 0) _exit(0);
		setsid();
		gen++;
	}
	_exit(0);
}
