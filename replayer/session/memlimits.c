/* memlimits.c — memory-limit options and their defaults (memlimits.h), shared by
 * rgpu-server and the offline tools so that a trace replays offline under
 * the limits the server would have applied. */
#include "memlimits.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

uint64_t rgpu_limits_default_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    uint64_t mem = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : (8ull << 30);
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    unsigned long long cg;
    if (f) {
        if (fscanf(f, "%llu", &cg) == 1 && cg > 0 && cg < mem) mem = cg;
        fclose(f);
    }
    int which[2] = { RLIMIT_AS, RLIMIT_DATA };
    for (int i = 0; i < 2; i++) {
        struct rlimit rl;
        if (getrlimit(which[i], &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < mem) mem = rl.rlim_cur;
    }
    return mem / 4 * 3;
}

bool rgpu_limits_parse_size(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return false;   /* no sign, no blanks */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return false;
    int shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : *end == 'G' || *end == 'g' ? 30 : 0;
    if (shift) {
        if (v > (UINT64_MAX >> shift)) return false;
        v <<= shift;
        end++;
    }
    if (*end) return false;
    *out = v;
    return true;
}

int rgpu_limits_option(rgpu_limit_opts *o, const char *prog, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    uint64_t *dst = !strcmp(a, "--max-memory")          ? &o->max_memory
                  : !strcmp(a, "--max-session-bytes")   ? &o->max_session_bytes
                  : !strcmp(a, "--max-storages")        ? &o->max_storages
                  : NULL;
    if (!dst) return 0;
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    uint64_t x;
    if (!v || !rgpu_limits_parse_size(v, &x) || (dst == &o->max_memory && !x)) {
        fprintf(stderr, "%s: %s wants %s, not '%s'\n", prog, a,
                dst == &o->max_storages ? "a count" : dst == &o->max_memory ? "a size > 0 (K, M, G suffixes)"
                                                                            : "a size (K, M, G suffixes; 0: none)",
                v ? v : "(nothing)");
        return -1;
    }
    *dst = x;
    if (dst == &o->max_session_bytes) o->session_bytes_given = true;
    *i += 1;
    return 1;
}

void rgpu_limits_resolve(rgpu_limit_opts *o) {
    if (!o->max_memory) o->max_memory = rgpu_limits_default_memory();
    if (!o->session_bytes_given) o->max_session_bytes = o->max_memory / 4 * 3;
}
