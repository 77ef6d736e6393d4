#include "hetex_run.h"
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *test_hetex_path(void)
{
    const char *bin = getenv("HX_HETEX");
    return bin && *bin ? bin : "build/hetex";
}

int test_hetex_run(const char *const *args, const char *crash_at, const char *log, char *out, size_t n)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600), in = open("/dev/null", O_RDONLY);
        if (fd < 0 || in < 0) _exit(127);
        dup2(in, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        if (crash_at) setenv("HX_CLI_CRASH_AT", crash_at, 1);
        else unsetenv("HX_CLI_CRASH_AT");
        const char *argv[32] = {test_hetex_path()};
        for (int i = 0; args[i] && i < 30; i++) argv[i + 1] = args[i];
        execv(argv[0], (char **)argv);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1000;
    FILE *f = fopen(log, "r");
    size_t k = f ? fread(out, 1, n - 1, f) : 0;
    out[k] = 0;
    if (f) fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : -1000;
}

bool test_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    bool ok = f && fputs(text, f) >= 0;
    if (f && fclose(f)) ok = false;
    return ok;
}

bool test_copy_rows(const char *src, const char *dst, int n, const char *only)
{
    FILE *in = fopen(src, "r"), *out = fopen(dst, "w");
    char line[4096];
    int k = 0;
    while (in && out && k < n && fgets(line, sizeof line, in)) {
        bool row = strchr(line, ',') != NULL;
        if (row && only && !strstr(line, only)) continue;
        fputs(line, out);
        k += row;
    }
    bool ok = in && out && k == n;
    if (in) fclose(in);
    if (out && fclose(out)) ok = false;
    return ok;
}

bool test_adult_folder(const char *dst, const char *src_dir, const char *train_text,
                      int train_rows, int test_rows, const char *test_label)
{
    char src[1024], path[1024];
    if (mkdir(dst, 0700)) return false;
    snprintf(path, sizeof path, "%s/adult.data", dst);
    snprintf(src, sizeof src, "%s/adult.data", src_dir);
    bool ok = train_text ? test_write_text(path, train_text)
                         : test_copy_rows(src, path, train_rows, NULL);
    snprintf(path, sizeof path, "%s/adult.test", dst);
    snprintf(src, sizeof src, "%s/adult.test", src_dir);
    return ok && test_copy_rows(src, path, test_rows, test_label);
}

bool test_same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = false;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

const char *test_hetex_expand(const char *a, const test_hetex_var *vars, int n_vars, char *buf,
                              size_t n)
{
    for (int i = 0; i < n_vars; i++) {
        size_t len = strlen(vars[i].name);
        if (!strncmp(a, vars[i].name, len)) {
            snprintf(buf, n, "%s%s", vars[i].value, a + len);
            return buf;
        }
    }
    return a;
}

void test_hetex_table(const test_hetex_case *cases, int n, const test_hetex_var *vars,
                      int n_vars, const char *log)
{
    static char out[1 << 16];
    for (int i = 0; i < n; i++) {
        const char *args[17] = {0};
        char shown[1024] = "", bufs[16][512], want[512];
        size_t k = 0;
        for (int j = 0; j < 16 && cases[i].args[j]; j++) {
            args[j] = test_hetex_expand(cases[i].args[j], vars, n_vars, bufs[j], sizeof bufs[j]);
            k += (size_t)snprintf(shown + k, sizeof shown - k, " %s", args[j]);
            if (k >= sizeof shown) k = sizeof shown - 1;
        }
        int rc = test_hetex_run(args, NULL, log, out, sizeof out);
        bool ok = rc == cases[i].rc;
        for (int w = 0; w < 4 && cases[i].want[w]; w++)
            ok = ok && strstr(out, test_hetex_expand(cases[i].want[w], vars, n_vars, want, sizeof want));
        CHECK(ok, "hetex%s: exit %d (want %d), output:\n%s", shown, rc, cases[i].rc, out);
    }
}
