/*
 * sched/proctree.c — walking, signalling and reaping the job's process tree (sched/proctree.h).
 */
#define _GNU_SOURCE
#include "sched/proctree.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"

/* Every descendant of root (by /proc/<pid>/stat ppid), appended to out; returns the count. */
int proc_descendants(pid_t root, pid_t *out, int max) {
    enum { NP = 32768 };
    static pid_t pid[NP], ppid[NP];
    int n = 0;
    DIR *d = opendir("/proc");
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < NP) {
        if (!isdigit((unsigned char)de->d_name[0])) continue;
        char p[300], buf[512];
        snprintf(p, sizeof(p), "/proc/%s/stat", de->d_name);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        size_t got = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[got] = '\0';
        char *rp = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
        int pp;
        if (!rp || sscanf(rp + 1, " %*c %d", &pp) != 1) continue;
        pid[n] = (pid_t)atoi(de->d_name);
        ppid[n++] = (pid_t)pp;
    }
    closedir(d);
    int m = 0;
    out[m++] = root;
    for (int head = 0; head < m; head++) /* BFS over the parent links */
        for (int i = 0; i < n && m < max; i++)
            if (ppid[i] == out[head] && pid[i] != root) out[m++] = pid[i];
    return m - 1 > 0 ? m - 1 : 0;
}

/* Signal the job: its process group (only while the launch process is unreaped: a reaped
 * leader's pid may be reused) and every descendant of the supervisor — as a subreaper it adopts
 * the job's orphans, and it has no other children. */
void proc_signal_all(pid_t child, int child_alive, int sig) {
    pid_t d[4096];
    int n = proc_descendants(getpid(), d, 4096);
    if (child_alive) kill(-child, sig);
    for (int i = 1; i <= n; i++) kill(d[i], sig);
}

/* 1 while the launch process has not been reaped. */
int proc_unreaped(pid_t child) {
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    return waitid(P_PID, (id_t)child, &si, WEXITED | WNOHANG | WNOWAIT) == 0;
}

/* Reap every child (and adopted orphan) that has exited; returns 1 when none is left. */
int proc_reap_all(void) {
    for (;;) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) continue;
        return p < 0 && errno == ECHILD;
    }
}

/* After a failure the job's ranks are of no further use: SIGKILL every descendant but the launch
 * process itself. Returns how many. */
int proc_kill_ranks(pid_t child) {
    pid_t d[4096];
    int n = proc_descendants(getpid(), d, 4096), k = 0;
    for (int i = 1; i <= n; i++)
        if (d[i] != child) k += kill(d[i], SIGKILL) == 0;
    return k;
}

/* Open MPI's session directory of an mpirun we SIGKILLed ($TMPDIR/ompi.<host>.<uid>/pid.<pid>):
 * a killed mpirun cannot remove it, and a job that fails every two minutes would leave hundreds. */
void proc_remove_mpi_session(pid_t pid) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !tmp[0]) tmp = "/tmp";
    DIR *d = opendir(tmp);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "ompi.", 5) != 0) continue;
        char p[4300];
        snprintf(p, sizeof(p), "%s/%s/pid.%d", tmp, de->d_name, (int)pid);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) fs_remove_tree(p, NULL, 0);
    }
    closedir(d);
}
