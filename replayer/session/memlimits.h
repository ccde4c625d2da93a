/* memlimits.h — the memory limits of a process's sessions, as rgpu-server and
 * the offline tools (rgpu-replay, rgpu-diff) take them: the same options,
 * the same defaults from the machine (memlimits.c).
 *
 *   --max-memory BYTES         the host-memory pool of all sessions together
 *                              (default 3/4 of what this process may use:
 *                              the machine's memory, its cgroup's limit,
 *                              RLIMIT_AS, RLIMIT_DATA)
 *   --max-session-bytes BYTES  per session (default 3/4 of --max-memory; 0: none)
 *   --max-storages N           live storages per session (default 0: none)
 *
 * Sizes take K, M, G suffixes (powers of 1024). */
#ifndef RGPU_SESSION_MEMLIMITS_H
#define RGPU_SESSION_MEMLIMITS_H

#include "session.h"

typedef struct rgpu_limit_opts {
    uint64_t max_memory;          /* 0 until given or resolved */
    uint64_t max_session_bytes;
    bool session_bytes_given;     /* --max-session-bytes was given (0 then means none) */
    uint64_t max_storages;
} rgpu_limit_opts;

/* --max-memory's default: 3/4 of the memory this process may use, so that the
 * limits make an OOM kill impossible while leaving room for the rest. */
uint64_t rgpu_limits_default_memory(void);

/* "123", "64K", "512M", "2G" into *out; false when s is not such a size. */
bool rgpu_limits_parse_size(const char *s, uint64_t *out);

/* When argv[*i] is one of the three options above: parse its value
 * (argv[*i + 1]), advance *i past it and return 1; a missing or bad value
 * prints one line "PROG: OPTION: ..." on stderr and returns -1; any other
 * argument returns 0 and leaves *i. */
int rgpu_limits_option(rgpu_limit_opts *o, const char *prog, int argc, char **argv, int *i);

/* Fill in the defaults of what was not given. */
void rgpu_limits_resolve(rgpu_limit_opts *o);

#endif
