/* server.h — rgpu-server's connection loop as a library (server_loop.c).
 *
 * rgpu-server's main (server_main.c) parses options into an
 * rgpu_server_config, prepares what the options name (token file, journal
 * and record directories, listening sockets) with the helpers below, and
 * runs rgpu_server_run; the fuzz target (tests/fuzz/fuzz_server.c) serves
 * one connection per input with rgpu_server_serve. One server per process:
 * rgpu_server_init takes its configuration once, before anything else. */
#ifndef RGPU_SERVER_H
#define RGPU_SERVER_H

#include "session.h"

#define RGPU_SERVER_TOKEN_HEX 64   /* a token: 32 random bytes, hex */

typedef struct rgpu_server_config {
    rgpu_backend *backend;         /* runs every session's ops (required) */
    bool quiet;                    /* --quiet: no log lines on stderr */
    bool no_auth;                  /* --no-auth: HELLOs need no token */
    char token[RGPU_SERVER_TOKEN_HEX + 1];   /* what a HELLO must carry (rgpu_server_setup_token) */
    char token_file[4096];         /* where it came from, read again at each HELLO ("": none) */
    const char *record_dir;        /* --record DIR: one .rgt per session, kept; NULL: none */
    const char *profile_dir;       /* --profile DIR: a Chrome-trace timeline per session; NULL: none */
    char journal_dir[4096];        /* --journal DIR; "": none */
    double grace;                  /* --grace SECONDS a dropped session waits for its client */
    uint64_t max_msg;              /* --max-message */
    uint64_t max_chunk;            /* --max-chunk */
    rgpu_session_limits limits;    /* --max-storages, --max-session-bytes, --graphs (pool: set by init) */
    uint64_t max_memory;           /* --max-memory: the host-memory pool of all sessions and messages */
    double hs_timeout;             /* --handshake-timeout SECONDS: HELLO must arrive whole by then */
    uint32_t max_conns;            /* --max-connections */
    uint64_t compact;              /* --journal-compact BYTES: checkpoint after this much journal */
    rgpu_rgt_sync journal_sync;    /* --journal-sync full|normal: what a journal commit waits for (default full) */
    uint32_t first_session_no;     /* the first session's number (logs, --record file names) */
    int parent_pid;                /* --exit-with-parent: stop when this process (our parent) is gone; 0 never */
    rgpu_files *files;             /* the folders every session's file ops reach (--data, --data-rw, --config,
                                      RGPU_REMOTE_DATA; dataopts.h); NULL: none */
} rgpu_server_config;

/* The defaults of rgpu-server's options (backend and token unset). */
void rgpu_server_config_default(rgpu_server_config *cfg);
/* Take cfg (copied) as this process's server. With a journal directory,
 * journals left there by an earlier process become dormant sessions that
 * their clients may resume for cfg->grace seconds. */
void rgpu_server_init(const rgpu_server_config *cfg);
/* Serve one connection on this thread until it ends; closes fd. */
void rgpu_server_serve(int fd, const char *peer);
/* Accept on the listening sockets fds[0..n), one thread per connection,
 * and free expired sessions, until rgpu_server_stop. 0, or -1 when poll fails. */
int rgpu_server_run(const int *fds, int n);
/* Ask rgpu_server_run to return (async-signal-safe: a SIGINT handler). */
void rgpu_server_stop(void);
/* A log line "rgpu-server: ..." on stderr, unless quiet. */
void rgpu_server_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- setup helpers for main (errors are printed on stderr, prefixed rgpu-server) */
/* A listening socket on "HOST:PORT" (or "PORT"), or -1. */
int rgpu_server_listen_tcp(const char *spec);
/* A listening Unix socket at path (mode 0600, for this user), or -1; never
 * over a live server's. */
int rgpu_server_listen_unix(const char *path);
/* The token in path into out: an existing token file of this user (mode
 * 0600, 64 hex digits) or a new one; 0, or -1 with the reason printed. */
int rgpu_server_setup_token(const char *path, char out[RGPU_SERVER_TOKEN_HEX + 1]);
/* One server per directory: an exclusive lock on DIR/.rgpu-server.lock
 * (kept open for the process's life); its fd, or -1. opt names the option. */
int rgpu_server_lock_dir(const char *dir, const char *opt);
/* mkdir -p, mode 0700; 0 or -1 (errno). */
int rgpu_server_mkdirs(const char *path);
/* DATA: $XDG_STATE_HOME/rgpu, else ~/.local/state/rgpu. */
void rgpu_server_data_dir(char *out, size_t n);
/* DATA is trusted (FORMAT.md §7.4): itself (lstat) a folder of this user,
 * not a symbolic link, not writable by group or others; every folder above
 * it (as realpath resolves it) this user's or root's and not writable by
 * group or others unless sticky (/tmp). 0, or -1 with why naming the path
 * and the rule. */
int rgpu_server_check_data_dir(const char *data, char *why, size_t n);
/* The process at the other end of Unix socket fd runs as uid (SO_PEERCRED;
 * getpeereid elsewhere). 0, or -1 with why. */
int rgpu_server_check_peer(int fd, unsigned uid, char *why, size_t n);
/* rgpu-server --stdio (FORMAT.md §7.4): relay stdin/stdout to this user's
 * daemon, started when none runs; the exit status. */
int rgpu_server_stdio_bridge(void);

#endif
