/*
 * sched/slurm.c — allocation, drain and requeue through scontrol (sched/slurm.h).
 *
 * scontrol is run with fork + execvp and its arguments as separate words, never through a shell:
 * the reason text comes from a failure message and must not be parsed as shell.
 */
#include "sched/slurm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "sched/plan.h"

int slurm_in_allocation(void) {
    const char *id = getenv("SLURM_JOB_ID"), *nl = getenv("SLURM_JOB_NODELIST");
    return id && *id && nl && *nl;
}

int slurm_write_hostfile(const char *path, char *err, size_t errlen) {
    plan_topo t;
    plan_topo_init(&t);
    if (plan_topo_from_slurm(&t, err, errlen) != 0) {
        plan_topo_free(&t);
        return -1;
    }
    fs_afile af; /* written atomically (core/fs.h): a relaunch never reads half a hostfile */
    FILE *fp = fs_stream_open(&af, path, err, errlen);
    if (!fp) {
        plan_topo_free(&t);
        return -1;
    }
    fprintf(fp, "# the Slurm allocation %s (SLURM_JOB_NODELIST %s)\n", getenv("SLURM_JOB_ID"),
            getenv("SLURM_JOB_NODELIST"));
    for (int i = 0; i < t.n_nodes; i++) fprintf(fp, "%s slots=%d\n", t.nodes[i].name, t.nodes[i].gpus);
    int n = t.n_nodes;
    plan_topo_free(&t);
    if (fs_stream_commit(&af, fp, err, errlen) != 0) return -1;
    return n;
}

/* Run scontrol with argv (NULL-terminated); 0 when it exits 0. */
static int run_scontrol(char *const argv[], char *err, size_t errlen) {
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        execvp("scontrol", argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            snprintf(err, errlen, "waitpid: %s", strerror(errno));
            return -1;
        }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    snprintf(err, errlen, "`scontrol %s %s ...` failed (%s %d)", argv[1], argv[2] ? argv[2] : "",
             WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    return -1;
}

int slurm_drain(const char *host, const char *why, char *err, size_t errlen) {
    char node[256], reason[512];
    snprintf(node, sizeof(node), "nodename=%s", host);
    snprintf(reason, sizeof(reason), "reason=minitrain: %s", why);
    char *argv[] = {"scontrol", "update", node, "state=drain", reason, NULL};
    return run_scontrol(argv, err, errlen);
}

int slurm_requeue(char *err, size_t errlen) {
    const char *id = getenv("SLURM_JOB_ID");
    if (!id || !*id) {
        snprintf(err, errlen, "requeue: not in a Slurm job (SLURM_JOB_ID unset)");
        return -1;
    }
    char job[64];
    snprintf(job, sizeof(job), "%s", id);
    char *argv[] = {"scontrol", "requeue", job, NULL};
    return run_scontrol(argv, err, errlen);
}
