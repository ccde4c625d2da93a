/* dataopts.c — the server-folder options (dataopts.h), shared by rgpu-server
 * and the offline tools so that a trace replays offline against the folders
 * the server exposed. */
#include "dataopts.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Add spec, or print "PROG: WHERE 'SHOWN': why" and return -1. */
static int add(rgpu_files *f, const char *prog, const char *where, const char *shown, const char *spec, bool writable) {
    char why[512];
    if (rgpu_files_add(f, spec, writable, why, sizeof why) == RGPU_OK) return 0;
    fprintf(stderr, "%s: %s '%s': %s\n", prog, where, shown, why);
    return -1;
}

int rgpu_data_option(rgpu_files *f, const char *prog, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    bool rw = !strcmp(a, "--data-rw");
    if (!rw && strcmp(a, "--data") != 0) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s wants [NAME=]DIR, a folder to expose%s\n", prog, a, rw ? " read-write" : " read-only");
        return -1;
    }
    *i += 1;
    return add(f, prog, a, argv[*i], argv[*i], rw) ? -1 : 1;
}

int rgpu_data_from_env(rgpu_files *f, const char *prog) {
    const char *v = getenv("RGPU_REMOTE_DATA");
    if (!v || !*v) return 0;
    char *copy = strdup(v);
    if (!copy) { fprintf(stderr, "%s: RGPU_REMOTE_DATA: out of memory\n", prog); return -1; }
    int rc = 0;
    char *save = NULL;
    for (char *e = strtok_r(copy, ";", &save); e && !rc; e = strtok_r(NULL, ";", &save)) {
        while (isspace((unsigned char)*e)) e++;
        size_t n = strlen(e);
        while (n && isspace((unsigned char)e[n - 1])) e[--n] = 0;
        if (!n) continue;
        bool rw = !strncmp(e, "rw:", 3);
        const char *spec = rw || !strncmp(e, "ro:", 3) ? e + 3 : e;
        rc = add(f, prog, "RGPU_REMOTE_DATA entry", e, spec, rw);
    }
    free(copy);
    return rc;
}

int rgpu_data_from_config(rgpu_files *f, const char *prog, const char *path) {
    FILE *fp = fopen(path, "r");
    if (!fp) { fprintf(stderr, "%s: %s: cannot read it: %s\n", prog, path, strerror(errno)); return -1; }
    char line[4200], where[4400];
    int rc = 0;
    for (int no = 1; !rc && fgets(line, sizeof line, fp); no++) {
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n' && !feof(fp)) {
            fprintf(stderr, "%s: %s:%d: a line longer than %zu bytes\n", prog, path, no, sizeof line - 2);
            rc = -1;
            break;
        }
        while (n && isspace((unsigned char)line[n - 1])) line[--n] = 0;
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (!*p || *p == '#') continue;
        char *key = p;
        while (*p && !isspace((unsigned char)*p)) p++;
        if (*p) *p++ = 0;
        while (isspace((unsigned char)*p)) p++;
        bool rw = !strcmp(key, "data-rw");
        snprintf(where, sizeof where, "%s:%d: %s", path, no, key);   /* "PATH:LINE: data-rw" */
        if (!rw && strcmp(key, "data") != 0) {
            fprintf(stderr, "%s: %s:%d: unknown setting '%s' (known: data [NAME=]DIR, data-rw [NAME=]DIR)\n", prog,
                    path, no, key);
            rc = -1;
        } else if (!*p) {
            fprintf(stderr, "%s: %s wants [NAME=]DIR\n", prog, where);
            rc = -1;
        } else {
            rc = add(f, prog, where, p, p, rw);
        }
    }
    if (!rc && ferror(fp)) { fprintf(stderr, "%s: %s: read failed\n", prog, path); rc = -1; }
    fclose(fp);
    return rc;
}

void rgpu_data_config_path(char *out, size_t n) {
    const char *x = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    if (x && x[0] == '/') snprintf(out, n, "%s/rgpu/server.conf", x);
    else snprintf(out, n, "%s/.config/rgpu/server.conf", home && *home ? home : ".");
}

void rgpu_data_describe(const rgpu_files *f, char *out, size_t n) {
    size_t off = 0;
    out[0] = 0;
    for (int i = 0; i < rgpu_files_count(f) && off < n; i++) {
        int k = snprintf(out + off, n - off, "%s%s=%s (%s)", i ? ", " : "", rgpu_files_name(f, i), rgpu_files_dir(f, i),
                         rgpu_files_writable(f, i) ? "read-write" : "read-only");
        if (k < 0) break;
        off += (size_t)k;
    }
}
