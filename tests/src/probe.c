/* A workload's process as the lineage net meets it, for the real-process tests (compiled by
 * the test with `cc -pthread`). It ignores SIGTERM, so only SIGKILL ends it, and writes its pid
 * to PIDFILE once it is in its final form:
 *
 *   probe rewrite PIDFILE       overwrites its environment block in place, as setproctitle
 *                               does (Ray, gunicorn, vLLM): /proc/<pid>/environ then reads
 *                               a title and NULs, no marker.
 *   probe leader-exits PIDFILE  its main thread exits while a second thread runs on: the
 *                               leader reads as a zombie, the process lives.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static const char *pidfile;
static pid_t leader;

static void write_pid(void) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", pidfile);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", (int)leader) < 0 || fclose(f) != 0 || rename(tmp, pidfile) != 0) {
        perror("probe: pid file");
        exit(2);
    }
}

static void hold(void) {
    for (;;)
        pause();
}

/* The environment strings as exec left them: contiguous, from environ[0] to the end of the
 * last one, which is what the kernel reads for /proc/<pid>/environ. */
static void rewrite_environment(void) {
    if (!environ || !environ[0])
        return;
    char *start = environ[0];
    char *end = start;
    for (char **e = environ; *e; e++) {
        char *past = *e + strlen(*e) + 1;
        if (past > end)
            end = past;
    }
    memset(start, 0, (size_t)(end - start));
    strncpy(start, "probe: rewritten title", (size_t)(end - start) - 1);
}

static int leader_is_zombie(void) {
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)leader);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    char *close = strrchr(text, ')');
    return close && close[1] == ' ' && close[2] == 'Z';
}

static void *follower(void *unused) {
    (void)unused;
    while (!leader_is_zombie())
        usleep(10000);
    write_pid();
    hold();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: probe rewrite|leader-exits PIDFILE\n");
        return 2;
    }
    pidfile = argv[2];
    leader = getpid();
    signal(SIGTERM, SIG_IGN);
    if (strcmp(argv[1], "rewrite") == 0) {
        rewrite_environment();
        write_pid();
        hold();
    }
    if (strcmp(argv[1], "leader-exits") == 0) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, follower, NULL) != 0)
            return 2;
        pthread_exit(NULL);
    }
    fprintf(stderr, "probe: unknown mode %s\n", argv[1]);
    return 2;
}
