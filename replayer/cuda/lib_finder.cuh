// lib_finder.cuh — finds a CUDA library at run time (dlopen) and binds its
// symbols: what cublas_loader.cu and cusolver_loader.cu share, so the backend
// builds and links without the libraries and runs wherever one can be found.
//
// The places a loader tries, each a call here (in its own order):
//   rgpu_lf_env:     $VAR, ':'-separated files or folders (a folder is
//                    searched for the sonames, in order);
//   rgpu_lf_dir:     one folder (e.g. where another library came from);
//   rgpu_lf_system:  the loader's own search (LD_LIBRARY_PATH, ld.so.cache,
//                    this binary's RUNPATH) for each soname, then the CUDA
//                    toolkit folders (/usr/local/cuda*/lib64, /usr/lib/x86_64-linux-gnu);
//   rgpu_lf_wheels:  pip wheels, <prefix>/lib/python3*/{site,dist}-packages/nvidia/{cu13,PKG}/lib
//                    for $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr/local, /usr,
//                    /opt/conda, then Debian's python3-* packages.
#ifndef RGPU_CUDA_LIB_FINDER_CUH
#define RGPU_CUDA_LIB_FINDER_CUH

#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rgpu_lib_finder {
    const char *const *sonames;   // tried in order in each folder and by the loader
    size_t n_sonames;
    // When a file whose name starts with `stem` is opened by path, `sibling`
    // + the rest of its name is opened first from the same folder (cuBLAS's
    // libcublasLt), so the dependency resolves from there; NULL: none.
    const char *stem, *sibling;
    void *lib;           // NULL until found
    char path[1024];     // what was opened
    char last[400];      // dlerror of the last attempt that found a file
};

// f cleared, to look for the sonames (see rgpu_lib_finder for stem, sibling).
static inline void rgpu_lf_init(rgpu_lib_finder *f, const char *const *sonames, size_t n, const char *stem,
                                const char *sibling) {
    memset(f, 0, sizeof *f);
    f->sonames = sonames;
    f->n_sonames = n;
    f->stem = stem;
    f->sibling = sibling;
}

// false, with "<what> not found (tried <tried>)" and the last error into why.
static inline bool rgpu_lf_not_found(const rgpu_lib_finder *f, const char *what, const char *tried, char *why,
                                     size_t whylen) {
    snprintf(why, whylen, "%s not found (tried %s)%s%s", what, tried, f->last[0] ? "; last error: " : "", f->last);
    return false;
}

static inline bool rgpu_lf_file_exists(const char *p) {
    FILE *f = fopen(p, "rb");
    if (!f) return false;
    fclose(f);
    return true;
}

// dlopen what (a path, or a soname for the loader's search); quiet_missing
// keeps "cannot open shared object file", the common not-there case, out of
// f->last, which keeps the reasons that explain more (a wrong dependency, ...).
static inline bool rgpu_lf_open(rgpu_lib_finder *f, const char *what, bool quiet_missing) {
    if (f->lib) return true;
    void *h = dlopen(what, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        if (!(quiet_missing && e && strstr(e, "cannot open shared object file")))
            snprintf(f->last, sizeof f->last, "%.*s", (int)sizeof f->last - 1, e ? e : what);
        return false;
    }
    f->lib = h;
    snprintf(f->path, sizeof f->path, "%s", what);
    return true;
}

// A library given by path, when the file is there (its sibling first).
static inline bool rgpu_lf_path(rgpu_lib_finder *f, const char *path) {
    if (f->lib || !rgpu_lf_file_exists(path)) return f->lib != NULL;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t nstem = f->stem ? strlen(f->stem) : 0;
    if (slash && f->stem && !strncmp(base, f->stem, nstem)) {
        char sib[1024];
        snprintf(sib, sizeof sib, "%.*s/%s%s", (int)(slash - path), path, f->sibling, base + nstem);
        if (rgpu_lf_file_exists(sib)) dlopen(sib, RTLD_NOW | RTLD_GLOBAL);   // kept open for the process's life
    }
    return rgpu_lf_open(f, path, false);
}

static inline bool rgpu_lf_dir(rgpu_lib_finder *f, const char *dir) {
    for (size_t i = 0; i < f->n_sonames && !f->lib; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, f->sonames[i]);
        rgpu_lf_path(f, p);
    }
    return f->lib != NULL;
}

// Every folder matching pattern (glob), in sorted order, newest last: tried
// in reverse so the newest python/toolkit wins.
static inline bool rgpu_lf_glob(rgpu_lib_finder *f, const char *pattern) {
    if (f->lib) return true;
    glob_t g;
    memset(&g, 0, sizeof g);
    if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0)
        for (size_t i = g.gl_pathc; i-- > 0 && !f->lib;) rgpu_lf_dir(f, g.gl_pathv[i]);
    globfree(&g);
    return f->lib != NULL;
}

static inline bool rgpu_lf_env(rgpu_lib_finder *f, const char *var) {
    const char *env = getenv(var);
    if (!env || !*env) return false;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *save = NULL, *tok = strtok_r(buf, ":", &save); tok && !f->lib; tok = strtok_r(NULL, ":", &save))
        if (!rgpu_lf_path(f, tok)) rgpu_lf_dir(f, tok);   // a file, else a folder
    return f->lib != NULL;
}

static inline bool rgpu_lf_system(rgpu_lib_finder *f) {
    for (size_t i = 0; i < f->n_sonames; i++)
        if (rgpu_lf_open(f, f->sonames[i], true)) return true;
    return rgpu_lf_dir(f, "/usr/local/cuda/lib64") || rgpu_lf_glob(f, "/usr/local/cuda-*/lib64") ||
           rgpu_lf_glob(f, "/usr/local/cuda-*/targets/x86_64-linux/lib") || rgpu_lf_dir(f, "/usr/lib/x86_64-linux-gnu");
}

// pkg: the wheel's folder under nvidia/ ("cublas", "cusolver"); CUDA 13
// wheels keep every library in nvidia/cu13/lib.
static inline bool rgpu_lf_wheels(rgpu_lib_finder *f, const char *pkg) {
    const char *prefixes[] = { getenv("VIRTUAL_ENV"), getenv("CONDA_PREFIX"), NULL, "/usr/local", "/usr", "/opt/conda" };
    char home_local[1024] = "";
    const char *home = getenv("HOME");
    if (home && *home) { snprintf(home_local, sizeof home_local, "%s/.local", home); prefixes[2] = home_local; }
    const char *const kinds[] = { "site", "dist" };
    const char *const subs[] = { "cu13", pkg };
    char pat[1200];
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        if (!prefixes[i] || !*prefixes[i]) continue;
        for (size_t j = 0; j < 2; j++)
            for (size_t k = 0; k < 2; k++) {
                snprintf(pat, sizeof pat, "%s/lib/python3*/%s-packages/nvidia/%s/lib", prefixes[i], kinds[k], subs[j]);
                if (rgpu_lf_glob(f, pat)) return true;
            }
    }
    for (size_t j = 0; j < 2; j++) {   // Debian's python3-* packages
        snprintf(pat, sizeof pat, "/usr/lib/python3/dist-packages/nvidia/%s/lib", subs[j]);
        if (rgpu_lf_glob(f, pat)) return true;
    }
    return false;
}

// One symbol of a library and the function-table slot it fills.
struct rgpu_lf_sym { const char *name; void **slot; };

// Fills every slot from lib; false (and every slot NULL) when one is
// missing, its name into *missing.
static inline bool rgpu_lf_bind(void *lib, const rgpu_lf_sym *syms, size_t n, const char **missing) {
    for (size_t i = 0; i < n; i++) {
        dlerror();
        *syms[i].slot = dlsym(lib, syms[i].name);
        if (!*syms[i].slot) {
            if (missing) *missing = syms[i].name;
            for (size_t j = 0; j < n; j++) *syms[j].slot = NULL;
            return false;
        }
    }
    return true;
}

// rgpu_lf_bind on the library f found, every symbol required: false when one
// is missing, with the reason into why and the library closed.
static inline bool rgpu_lf_bind_all(rgpu_lib_finder *f, const rgpu_lf_sym *syms, size_t n, const char *what,
                                    char *why, size_t whylen) {
    const char *missing = NULL;
    if (rgpu_lf_bind(f->lib, syms, n, &missing)) return true;
    snprintf(why, whylen, "%s has no %s (too old a %s?)", f->path, missing, what);
    dlclose(f->lib);
    f->lib = NULL;
    return false;
}

#endif
