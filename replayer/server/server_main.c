/* server_main.c — rgpu-server's main: options into an rgpu_server_config,
 * the token, journal and record directories, the listening sockets, then
 * the connection loop (server_loop.c, server.h). */
#include "server.h"
#include "dataopts.h"
#include "memlimits.h"
#include "cpu/cpu_pool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: rgpu-server [--listen HOST:PORT] [--unix PATH] [--backend cpu|cuda|null|auto]\n"
        "                   [--token-file PATH] [--journal DIR|none] [--journal-sync full|normal]\n"
        "                   [--grace SECONDS]\n"
        "                   [--max-message BYTES] [--max-chunk BYTES] [--max-session-bytes BYTES]\n"
        "                   [--max-memory BYTES] [--max-storages N] [--max-connections N]\n"
        "                   [--handshake-timeout SECONDS] [--graphs on|off] [--threads N] [--record DIR] [--profile DIR] [--quiet]\n"
        "                   [--data [NAME=]DIR]... [--data-rw [NAME=]DIR]... [--config FILE]\n"
        "                   [--exit-with-parent]\n"
        "\n"
        "       rgpu-server --stdio   (the host end of RGPU_SERVER=ssh://host: see below)\n"
        "\n"
        "Executes rgpu op traces streamed by clients (import rgpu; RGPU_SERVER=...).\n"
        "\n"
        "  --listen HOST:PORT  TCP address (default 127.0.0.1:7437 when no --unix is given;\n"
        "                      the host defaults to 127.0.0.1: expose it through an SSH tunnel)\n"
        "  --unix PATH         also (or only) listen on a Unix socket, mode 0600\n"
        "  --backend NAME      cpu (reference), cuda, null (executes nothing, answers zeros:\n"
        "                      for measuring the client), auto (cuda when usable, else cpu;\n"
        "                      default)\n"
        "  --token-file PATH   the token clients must send (RGPU_TOKEN / RGPU_TOKEN_FILE);\n"
        "                      used if PATH is a regular file of this user, mode 0600, holding a\n"
        "                      token; created when absent; anything else refuses to start\n"
        "                      (default DATA/token, where DATA is $XDG_STATE_HOME/rgpu or\n"
        "                      ~/.local/state/rgpu: a folder of this user's, not writable by\n"
        "                      others, nor any folder above it unless sticky like /tmp).\n"
        "                      Read again at each HELLO and once a second: deleted, it is\n"
        "                      written back with this server's token; holding another good\n"
        "                      token, that one is used from then on\n"
        "  --no-auth           accept clients without a token (tests only: anyone who can\n"
        "                      connect can run ops and read the session's memory)\n"
        "  --journal DIR|none  commit every chunk and blob to DIR/session-ID.rgt before\n"
        "                      acknowledging it, so a restarted server resumes the session\n"
        "                      (default DATA/journal/<listen address>); one server per DIR\n"
        "                      (locked); a failed journal write (or one that cannot be created:\n"
        "                      a full disk, no file descriptor left) turns it off for that\n"
        "                      session, loudly, the client is told (a RuntimeWarning at its next\n"
        "                      wait, rgpu.stats()[\"journal\"]), and the session goes on; a\n"
        "                      detached session's journal is closed until it is resumed\n"
        "  --journal-sync full|normal\n"
        "                      what an ACK promises (FORMAT.md §7.3). full (default): the chunks it\n"
        "                      acknowledges are fsynced (SQLite synchronous=FULL, one fsync for all\n"
        "                      the chunks since the last ACK): they survive a power cut, when the\n"
        "                      disk honours fsync. normal: committed to the OS, no fsync: they\n"
        "                      survive the server being killed, not a power cut\n"
        "  --journal-compact BYTES\n"
        "                      after this much journal (and twice the last checkpoint) a session's\n"
        "                      state is checkpointed into it and older entries dropped (64M)\n"
        "  --data [NAME=]DIR   expose folder DIR read-only to clients as NAME (default: DIR's\n"
        "                      last component; NAME is 1-64 of A-Z a-z 0-9 . _ -): rgpu.from_file,\n"
        "                      rgpu.load, rgpu.listdir and rgpu.stat read \"NAME/rel/path\" there, and\n"
        "                      nowhere else (no .., no absolute path, no symlink leads out).\n"
        "                      Repeatable. Default: no folder (every file op fails with\n"
        "                      RGPU_ERR_PATH)\n"
        "  --data-rw [NAME=]DIR\n"
        "                      the same, read-write: rgpu.save writes its checkpoints there\n"
        "                      (a temporary file, fsynced, renamed over the name: never half of\n"
        "                      one). A session rebuilt from its --journal reads its files again,\n"
        "                      checking each one's size and hash, and refuses to resume when one\n"
        "                      changed; a checkpoint its client got the answer for is not written\n"
        "                      again.\n"
        "                      Also RGPU_REMOTE_DATA in the server's environment: entries separated\n"
        "                      by ';', each ro:[NAME=]DIR or rw:[NAME=]DIR (ro: when no prefix); the\n"
        "                      embedded server a client starts inherits it. A bad spec, a DIR that\n"
        "                      is not a folder or a NAME given twice: the server refuses to start\n"
        "  --config FILE       more folders from FILE: lines `data [NAME=]DIR` and\n"
        "                      `data-rw [NAME=]DIR`; blank lines and lines starting with #\n"
        "                      ignored. The daemon --stdio starts reads\n"
        "                      $XDG_CONFIG_HOME/rgpu/server.conf (default ~/.config/rgpu/server.conf)\n"
        "                      when it exists, and RGPU_REMOTE_DATA from the environment of the\n"
        "                      ssh session that started it: both are read when the daemon starts,\n"
        "                      so a change takes effect at its next start (stop it: kill the\n"
        "                      rgpu-server whose pid DATA/daemon/log names; the next connection\n"
        "                      starts a new one, and its journals resume the sessions)\n"
        "  --exit-with-parent  stop when the process that started the server is gone\n"
        "                      (the embedded server of a client that was killed)\n"
        "  --grace SECONDS     keep a session whose connection dropped this long for its\n"
        "                      client to resume it (default 300)\n"
        "  --max-message BYTES largest wire message accepted (default 16 GiB + 4 KiB; a CHUNK\n"
        "                      is also bounded by --max-chunk, other messages by 1 MiB)\n"
        "  --max-chunk BYTES   largest decoded chunk accepted (default 64 MiB)\n"
        "  --max-memory BYTES  host memory for all sessions together: storages (cpu backend),\n"
        "                      uploads, templates, results, messages (default 3/4 of the\n"
        "                      machine's or the cgroup's memory)\n"
        "  --max-session-bytes BYTES, --max-storages N\n"
        "                      per-session limits on bytes held (storages, uploads, templates,\n"
        "                      results; default 3/4 of --max-memory, 0: none) and live storages;\n"
        "                      an op over them fails (RGPU_ERR_LIMIT, reported at the next wait)\n"
        "  --max-connections N open connections (default 256); more are refused with an ERROR\n"
        "  --handshake-timeout SECONDS\n"
        "                      a client's HELLO must arrive whole within this (default 10)\n"
        "  --threads N         threads of the cpu backend's kernels, shared by all sessions\n"
        "                      (default: the cores this process may use, affinity and cgroup\n"
        "                      quota aware; or $RGPU_THREADS). Results never depend on it\n"
        "  --graphs on|off     replay the second and later calls of a compiled graph's\n"
        "                      template as one captured graph where the backend can (cuda;\n"
        "                      cpu for testing); results never change (default off)\n"
        "  --record DIR        write each session's trace (chunks, blobs, wait results) to\n"
        "                      DIR/session-N.rgt, replayable with rgpu-replay (N goes on past\n"
        "                      the traces already there: none is overwritten; one server per DIR)\n"
        "  --profile DIR       time every record of each session and write its timeline,\n"
        "                      a Chrome trace (Perfetto, chrome://tracing), to DIR/session-N.json\n"
        "                      when the session ends or detaches (session-N.K.json for a\n"
        "                      resumed one's later part): host spans, one per record\n"
        "  --quiet             no log lines on stderr\n"
        "  --stdio             relay stdin/stdout to this user's daemon (an rgpu-server on\n"
        "                      DATA/daemon/sock, started detached when none runs, log in\n"
        "                      DATA/daemon/log), putting its token into the client's HELLO:\n"
        "                      what `ssh host rgpu-server --stdio` runs for RGPU_SERVER=ssh://host.\n"
        "                      Refused unless DATA is safe (as for --token-file) and\n"
        "                      DATA/daemon is a real folder of this user's, mode 0700; the\n"
        "                      token goes only to a daemon of this user (SO_PEERCRED)\n"
        "  --version           the version, trace format and op table\n"
        "  --help              this text\n"
        "Sizes take K, M, G suffixes.\n");
}


static void on_signal(int sig) { (void)sig; rgpu_server_stop(); }

int main(int argc, char **argv) {
    rgpu_pool_prepare_process(argv);
    const char *tcp = NULL, *unix_path = NULL, *backend = "auto", *token_file = NULL, *journal = NULL, *config = NULL;
    int threads = 0;
    rgpu_limit_opts lim = { 0 };
    rgpu_server_config cfg;
    rgpu_server_config_default(&cfg);
    cfg.files = rgpu_files_new();
    if (!cfg.files) { fprintf(stderr, "rgpu-server: out of memory\n"); return 1; }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        int k = rgpu_limits_option(&lim, "rgpu-server", argc, argv, &i);   /* --max-memory, --max-session-bytes, --max-storages */
        if (!k) k = rgpu_data_option(cfg.files, "rgpu-server", argc, argv, &i);   /* --data, --data-rw */
        if (k < 0) return 2;
        if (k) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--version")) {
            uint8_t t[16];
            rgpu_op_table_hash(t);
            printf("rgpu-server %s (trace format %u, wire protocol %u, %d ops, op table %02x%02x%02x%02x...)\n", RGPU_VERSION,
                   RGPU_FORMAT_VERSION, RGPU_WIRE_VERSION, RGPU_OP_COUNT, t[0], t[1], t[2], t[3]);
            return 0;
        }
        else if (!strcmp(a, "--stdio")) { signal(SIGPIPE, SIG_IGN); return rgpu_server_stdio_bridge(); }
        else if (!strcmp(a, "--quiet")) cfg.quiet = true;
        else if (!strcmp(a, "--exit-with-parent")) cfg.parent_pid = (int)getppid();
        else if (!strcmp(a, "--no-auth")) cfg.no_auth = true;
        else if (!strcmp(a, "--listen") && more) tcp = argv[++i];
        else if (!strcmp(a, "--unix") && more) unix_path = argv[++i];
        else if (!strcmp(a, "--backend") && more) backend = argv[++i];
        else if (!strcmp(a, "--record") && more) cfg.record_dir = argv[++i];
        else if (!strcmp(a, "--profile") && more) cfg.profile_dir = argv[++i];
        else if (!strcmp(a, "--token-file") && more) token_file = argv[++i];
        else if (!strcmp(a, "--journal") && more) journal = argv[++i];
        else if (!strcmp(a, "--config") && more) config = argv[++i];
        else if (!strcmp(a, "--grace") && more) {
            char *end;
            cfg.grace = strtod(argv[++i], &end);
            if (*end || cfg.grace < 0) { fprintf(stderr, "rgpu-server: --grace wants seconds >= 0\n"); return 2; }
        }
        else if (!strcmp(a, "--max-message") && more) { if (!rgpu_limits_parse_size(argv[++i], &cfg.max_msg) || cfg.max_msg < 4096) goto bad_size; }
        else if (!strcmp(a, "--max-chunk") && more) { if (!rgpu_limits_parse_size(argv[++i], &cfg.max_chunk) || !cfg.max_chunk) goto bad_size; }
        else if (!strcmp(a, "--journal-compact") && more) { if (!rgpu_limits_parse_size(argv[++i], &cfg.compact) || !cfg.compact) goto bad_size; }
        else if (!strcmp(a, "--max-connections") && more) {
            uint64_t v;
            if (!rgpu_limits_parse_size(argv[++i], &v) || !v || v > 1000000) goto bad_size;
            cfg.max_conns = (uint32_t)v;
        }
        else if (!strcmp(a, "--handshake-timeout") && more) {
            char *end;
            cfg.hs_timeout = strtod(argv[++i], &end);
            if (*end || !(cfg.hs_timeout > 0)) { fprintf(stderr, "rgpu-server: --handshake-timeout wants seconds > 0\n"); return 2; }
        }
        else if (!strcmp(a, "--journal-sync") && more) {
            const char *v = argv[++i];
            if (!strcmp(v, "full")) cfg.journal_sync = RGPU_RGT_SYNC_FULL;
            else if (!strcmp(v, "normal")) cfg.journal_sync = RGPU_RGT_SYNC_NORMAL;
            else { fprintf(stderr, "rgpu-server: --journal-sync wants full or normal, not '%s'\n", v); return 2; }
        }
        else if (!strcmp(a, "--threads") && more) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 256) { fprintf(stderr, "rgpu-server: --threads wants 1..256, not '%s'\n", argv[i]); return 2; }
            threads = (int)v;
        }
        else if (!strcmp(a, "--graphs") && more) {
            const char *v = argv[++i];
            if (!strcmp(v, "on")) cfg.limits.graphs = true;
            else if (!strcmp(v, "off")) cfg.limits.graphs = false;
            else { fprintf(stderr, "rgpu-server: --graphs wants on or off, not '%s'\n", v); return 2; }
        }
        else { fprintf(stderr, "rgpu-server: unknown or incomplete option '%s'\n", a); usage(stderr); return 2; }
        continue;
    bad_size:
        fprintf(stderr, "rgpu-server: %s: bad size '%s'\n", a, argv[i]);
        return 2;
    }
    if ((config && rgpu_data_from_config(cfg.files, "rgpu-server", config)) || rgpu_data_from_env(cfg.files, "rgpu-server"))
        return 2;
    if (!tcp && !unix_path) tcp = "127.0.0.1:7437";
    rgpu_limits_resolve(&lim);
    cfg.max_memory = lim.max_memory;
    cfg.limits.max_total_bytes = lim.max_session_bytes;
    cfg.limits.max_storages = lim.max_storages;
    if (cfg.record_dir && mkdir(cfg.record_dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "rgpu-server: --record %s: %s\n", cfg.record_dir, strerror(errno));
        return 1;
    }
    if (cfg.profile_dir && mkdir(cfg.profile_dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "rgpu-server: --profile %s: %s\n", cfg.profile_dir, strerror(errno));
        return 1;
    }
    if (cfg.record_dir) {
        if (rgpu_server_lock_dir(cfg.record_dir, "--record") < 0) return 1;
        /* session numbers go on past an earlier run's traces: none is overwritten */
        DIR *d = opendir(cfg.record_dir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            unsigned no;
            char tail[8];
            if (sscanf(e->d_name, "session-%u.%7s", &no, tail) == 2 && !strcmp(tail, "rgt") && no >= cfg.first_session_no)
                cfg.first_session_no = no + 1;
        }
        if (d) closedir(d);
    }
    char data[1024];
    rgpu_server_data_dir(data, sizeof data);
    if ((!cfg.no_auth && !token_file) || !journal) {   /* DATA holds the token or the journals: it must be safe */
        char why[600];
        if (rgpu_server_mkdirs(data)) {
            fprintf(stderr, "rgpu-server: cannot create %s for the token file and journals: %s\n", data, strerror(errno));
            return 1;
        }
        if (rgpu_server_check_data_dir(data, why, sizeof why)) {
            fprintf(stderr, "rgpu-server: %s; refusing to start\n", why);
            return 1;
        }
    }

    char tf[4200] = "";
    if (!cfg.no_auth) {
        if (token_file) snprintf(tf, sizeof tf, "%s", token_file);
        else snprintf(tf, sizeof tf, "%s/token", data);
        if (rgpu_server_setup_token(tf, cfg.token)) return 1;
        snprintf(cfg.token_file, sizeof cfg.token_file, "%s", tf);
    }
    if (!journal) {
        /* one folder per listen address: a server restarted on the same
         * address finds its journals; two servers never share one */
        char addr[512];
        snprintf(addr, sizeof addr, "%s%s%s", tcp ? tcp : "", tcp && unix_path ? "+" : "", unix_path ? unix_path : "");
        for (char *q = addr; *q; q++)
            if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '.' || *q == '-')) *q = '_';
        snprintf(cfg.journal_dir, sizeof cfg.journal_dir, "%s/journal/%s", data, addr);
    } else if (strcmp(journal, "none") != 0) {
        snprintf(cfg.journal_dir, sizeof cfg.journal_dir, "%s", journal);
    }
    if (cfg.journal_dir[0]) {
        if (rgpu_server_mkdirs(cfg.journal_dir)) {
            fprintf(stderr, "rgpu-server: --journal %s: %s\n", cfg.journal_dir, strerror(errno));
            return 1;
        }
        if (rgpu_server_lock_dir(cfg.journal_dir, "--journal") < 0) return 1;
    }

    char why[256] = "";
    if (threads) rgpu_pool_set_threads(threads);
    cfg.backend = rgpu_backend_create(backend, why, sizeof why);
    if (!cfg.backend) {
        fprintf(stderr, "rgpu-server: --backend %s: %s\n", backend, why);
        return strncmp(why, "unknown", 7) ? 1 : 2;
    }
    rgpu_server_init(&cfg);   /* the journals of an earlier run become resumable sessions */
    if (cfg.no_auth) rgpu_server_log("--no-auth: accepting clients without a token");
    else rgpu_server_log("token in %s (clients: RGPU_TOKEN_FILE=%s)", tf, tf);
    if (why[0]) rgpu_server_log("%s", why);
    char exposed[4096];
    rgpu_data_describe(cfg.files, exposed, sizeof exposed);
    if (exposed[0]) rgpu_server_log("exposing %s", exposed);
    else rgpu_server_log("no folder exposed to clients' file ops (--data DIR, --data-rw DIR)");
    if (cfg.limits.graphs)
        rgpu_server_log(cfg.backend->graph_begin ? "--graphs on: repeated template calls replay as %s graphs"
                                                 : "--graphs on: the %s backend has no graphs; every call runs record by record",
                        cfg.backend->name);

    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int fds[2], n = 0;
    if (tcp && (fds[n++] = rgpu_server_listen_tcp(tcp)) < 0) return 1;
    if (unix_path && (fds[n++] = rgpu_server_listen_unix(unix_path)) < 0) return 1;
    rgpu_server_log("listening on %s%s%s%s (backend %s, format %u, wire %u, %d ops, journal %s%s, grace %g s, pid %d)", tcp ? tcp : "",
                    tcp && unix_path ? " and " : "", unix_path ? "unix:" : "", unix_path ? unix_path : "", cfg.backend->name,
                    RGPU_FORMAT_VERSION, RGPU_WIRE_VERSION, RGPU_OP_COUNT, cfg.journal_dir[0] ? cfg.journal_dir : "none",
                    !cfg.journal_dir[0] ? "" : cfg.journal_sync == RGPU_RGT_SYNC_FULL ? " (sync full)" : " (sync normal)",
                    cfg.grace, (int)getpid());
    rgpu_server_run(fds, n);
    for (int i = 0; i < n; i++) close(fds[i]);
    if (unix_path) unlink(unix_path);
    rgpu_server_log("stopped");
    rgpu_files_free(cfg.files);
    return 0;
}
