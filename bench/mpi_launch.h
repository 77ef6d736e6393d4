/* For the benchmarks that run as MPI jobs (bench_zero, bench_ps,
 * bench_pin): run plainly, the program starts itself under mpirun (at 1,
 * 2 and 4 ranks, or the ones it names) with --rank, where each rank does
 * the work; its JSON lines come out of the ranks. */
#ifndef HX_BENCH_MPI_LAUNCH_H
#define HX_BENCH_MPI_LAUNCH_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* rank_main() when argv says --rank; else one mpirun job of this
 * executable per entry of ranks (n of them), with mpirun's options
 * `opts` (such as "--bind-to none"; "" for none), 1 when one of them
 * fails (name: the benchmark's, for errors). */
static inline int bench_mpi_main_at(const char *name, int argc, char **argv, int (*rank_main)(void),
                                    const int *ranks, int n, const char *opts)
{
    if (argc > 1 && !strcmp(argv[1], "--rank")) return rank_main();
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "%s: cannot find its own executable\n", name);
        return 1;
    }
    self[len] = 0;
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0); /* CI and this machine run as root */
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char cmd[4400];
        snprintf(cmd, sizeof cmd, "mpirun --oversubscribe %s -np %d '%s' --rank", opts, ranks[i], self);
        fflush(stdout);
        if (system(cmd) != 0) {
            fprintf(stderr, "%s: %s failed\n", name, cmd);
            rc = 1;
        }
    }
    return rc;
}

/* bench_mpi_main_at at 1, 2 and 4 ranks, mpirun's default binding. */
static inline int bench_mpi_main(const char *name, int argc, char **argv, int (*rank_main)(void))
{
    static const int ranks[3] = {1, 2, 4};
    return bench_mpi_main_at(name, argc, argv, rank_main, ranks, 3, "");
}

#endif
