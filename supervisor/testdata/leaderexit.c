/* leaderexit: main's thread ends with pthread_exit while another thread
 * lives on, so that /proc/PID/stat of the leader reads Z. SIGTERM is
 * ignored. Once the leader reads Z, the living thread creates argv[1]
 * (readiness) and pauses for good. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *ready;
static pid_t leader;

static void *live(void *arg)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)leader);
	for (;;) {
		FILE *f = fopen(path, "r");
		size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
		if (f)
			fclose(f);
		buf[n] = 0;
		char *p = strrchr(buf, ')');
		if (p && p[1] == ' ' && p[2] == 'Z')
			break;
		usleep(1000);
	}
	FILE *r = fopen(ready, "w");
	if (r) {
		fprintf(r, "%d\n", (int)leader);
		fclose(r);
	}
	for (;;)
		pause();
	return arg;
}

int main(int argc, char **argv)
{
	pthread_t t;
	if (argc < 2)
		return 2;
	ready = argv[1];
	leader = getpid();
	signal(SIGTERM, SIG_IGN);
	if (pthread_create(&t, 0, live, 0) != 0)
		return 1;
	pthread_exit(0);
}
