/* leftover MODE PIDFILE: a process that hides from a search by environment,
   writes its pid to PIDFILE and waits for a signal (SIGTERM ends it).
     title        overwrites its argv and environment in place (as a
                  process title rewrite does): /proc/PID/environ no longer
                  holds fencerun's marker
     nondumpable  prctl(PR_SET_DUMPABLE, 0): its environment cannot be read
                  by another non-root user
   It exits by itself after 60 s, so that an escaped one ends. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
extern char **environ;
int main(int argc, char **argv) {
	if (argc != 3) return 2;
	FILE *f = fopen(argv[2], "w");
	if (!f) return 1;
	fprintf(f, "%d\n", getpid());
	fclose(f);
	if (strcmp(argv[1], "title") == 0) {
		char *start = argv[0], *end = argv[argc - 1] + strlen(argv[argc - 1]);
		for (char **e = environ; *e; e++) end = *e + strlen(*e);
		memset(start, 0, end - start);
		strcpy(start, "innocent");
		prctl(PR_SET_NAME, "innocent");
	} else if (strcmp(argv[1], "nondumpable") == 0) {
		prctl(PR_SET_DUMPABLE, 0);
	} else {
		return 2;
	}
	sleep(60);
	return 0;
}
