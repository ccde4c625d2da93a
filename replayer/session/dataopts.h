/* dataopts.h — the server folders of a process's sessions (files.h), as
 * rgpu-server and the offline tools (rgpu-replay, rgpu-diff) take them
 * (dataopts.c; FORMAT.md §7.5):
 *
 *   --data [NAME=]DIR      expose DIR read-only as NAME (default: DIR's
 *                          basename); repeatable
 *   --data-rw [NAME=]DIR   the same, read-write (SAVE_ZIP writes there)
 *   RGPU_REMOTE_DATA       in the process's own environment: entries
 *                          separated by ';', each ro:[NAME=]DIR or
 *                          rw:[NAME=]DIR (ro: when no prefix)
 *   a config file          (rgpu-server --config FILE; the per-user daemon's
 *                          $XDG_CONFIG_HOME/rgpu/server.conf): lines
 *                          "data [NAME=]DIR" / "data-rw [NAME=]DIR", blank
 *                          lines and lines starting with '#' ignored
 *
 * All of them add to one set; a bad spec, a DIR that is not a folder or a
 * NAME given twice is an error naming it (the program refuses to start). */
#ifndef RGPU_SESSION_DATAOPTS_H
#define RGPU_SESSION_DATAOPTS_H

#include "files.h"

/* When argv[*i] is --data or --data-rw: add its value (argv[*i + 1]) to f,
 * advance *i past it and return 1; a missing or bad value prints one line
 * "PROG: OPTION SPEC: why" on stderr and returns -1; any other argument
 * returns 0 and leaves *i. */
int rgpu_data_option(rgpu_files *f, const char *prog, int argc, char **argv, int *i);
/* RGPU_REMOTE_DATA into f (unset or empty: nothing); 0, or -1 with one line
 * "PROG: RGPU_REMOTE_DATA entry 'E': why" printed. */
int rgpu_data_from_env(rgpu_files *f, const char *prog);
/* The data lines of config file path into f; 0, or -1 with one line
 * "PROG: PATH:LINE: why" printed (a file that cannot be read is an error). */
int rgpu_data_from_config(rgpu_files *f, const char *prog, const char *path);
/* The per-user daemon's config file: $XDG_CONFIG_HOME/rgpu/server.conf,
 * else ~/.config/rgpu/server.conf. */
void rgpu_data_config_path(char *out, size_t n);
/* "data=/srv/d (read-only), ckpt=/srv/c (read-write)", or "" when nothing
 * is exposed. */
void rgpu_data_describe(const rgpu_files *f, char *out, size_t n);

#endif
