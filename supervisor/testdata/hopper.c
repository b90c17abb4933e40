/* hopper: a reaper (a child subreaper that reaps) starts, in a process
 * group of its own with argv[2] ("NAME=value") its environment, a
 * process that forks and exits in a loop, ignoring SIGTERM, so that no pid
 * of it lives long enough to be read twice. Its first process writes its
 * pid to argv[1] and stops itself; the test continues it. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	pid_t first = 0;
	if (strcmp(argv[2], "hop") != 0) {
		prctl(PR_SET_CHILD_SUBREAPER, 1);
		first = fork();
	}
	if (first > 0) {
		for (;;)
			if (wait(NULL) < 0 && errno == ECHILD)
				usleep(1000);
	}
	if (first < 0)
		return 1;
	setpgid(0, 0);
	if (strcmp(argv[2], "hop") != 0) {
		/* In /proc/PID/environ: the environment it is exec'd with. */
		char *env[] = {argv[2], NULL};
		char *args[] = {argv[0], argv[1], "hop", NULL};
		execve("/proc/self/exe", args, env);
		return 1;
	}
	signal(SIGTERM, SIG_IGN);
	FILE *r = fopen(argv[1], "w");
	if (r) {
		fprintf(r, "%d\n", (int)getpid());
		fclose(r);
	}
	raise(SIGSTOP);
	for (;;) {
		pid_t pid = fork();
		if (pid > 0)
			_exit(0);
		if (pid < 0)
			usleep(1000);
	}
}
