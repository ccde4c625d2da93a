// cusolver_loader.cu — finds cuSOLVER at run time (dlopen), as
// cublas_loader.cu finds cuBLAS, so the backend builds and links without it
// and runs the linalg family wherever a cuSOLVER 12 or 11 can be found.
//
// Where it looks, in order:
//   1. $RGPU_CUSOLVER_PATH: ':'-separated files or folders (a folder is
//      searched for libcusolver.so.12, .so.11, .so);
//   2. the folder the loaded cuBLAS came from (toolkits and CUDA 13 wheels
//      keep them together);
//   3. the loader's search: libcusolver.so.12, .so.11, .so;
//   4. the CUDA toolkit folders (/usr/local/cuda*/lib64, /usr/lib/x86_64-linux-gnu);
//   5. pip wheels: <prefix>/lib/python3*/{site,dist}-packages/nvidia/{cu13,cusolver}/lib
//      for $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr/local, /usr, /opt/conda.
#include "common.cuh"

#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

static const char *const SONAMES[] = { "libcusolver.so.12", "libcusolver.so.11", "libcusolver.so" };
#define N_SONAMES (sizeof SONAMES / sizeof SONAMES[0])

struct sfinder {
    void *lib;
    char path[1024];
    char last[400];
};

static bool s_open(sfinder *f, const char *what, bool quiet_missing) {
    if (f->lib) return true;
    void *h = dlopen(what, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        if (e && !(quiet_missing && strstr(e, "cannot open shared object file")))
            snprintf(f->last, sizeof f->last, "%s", e);
        return false;
    }
    f->lib = h;
    snprintf(f->path, sizeof f->path, "%s", what);
    return true;
}

static bool s_dir(sfinder *f, const char *dir) {
    for (size_t i = 0; i < N_SONAMES && !f->lib; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, SONAMES[i]);
        FILE *fp = fopen(p, "rb");
        if (!fp) continue;
        fclose(fp);
        s_open(f, p, false);
    }
    return f->lib != NULL;
}

static bool s_glob(sfinder *f, const char *pattern) {
    if (f->lib) return true;
    glob_t g;
    memset(&g, 0, sizeof g);
    if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0)
        for (size_t i = g.gl_pathc; i-- > 0 && !f->lib;) s_dir(f, g.gl_pathv[i]);
    globfree(&g);
    return f->lib != NULL;
}

static bool find_cusolver(sfinder *f, const rgpu_cublas *blas) {
    const char *env = getenv("RGPU_CUSOLVER_PATH");
    if (env && *env) {
        char buf[4096];
        snprintf(buf, sizeof buf, "%s", env);
        for (char *save = NULL, *tok = strtok_r(buf, ":", &save); tok && !f->lib; tok = strtok_r(NULL, ":", &save))
            if (!s_dir(f, tok) && strstr(tok, "libcusolver")) s_open(f, tok, false);
        if (f->lib) return true;
    }
    if (blas && blas->lib) {
        char origin[1024] = "";
        if (dlinfo(blas->lib, RTLD_DI_ORIGIN, origin) == 0 && origin[0] && s_dir(f, origin)) return true;
    }
    for (size_t i = 0; i < N_SONAMES; i++)
        if (s_open(f, SONAMES[i], true)) return true;
    if (s_dir(f, "/usr/local/cuda/lib64") || s_glob(f, "/usr/local/cuda-*/lib64") ||
        s_glob(f, "/usr/local/cuda-*/targets/x86_64-linux/lib") || s_dir(f, "/usr/lib/x86_64-linux-gnu"))
        return true;
    const char *prefixes[] = { getenv("VIRTUAL_ENV"), getenv("CONDA_PREFIX"), NULL, "/usr/local", "/usr", "/opt/conda" };
    char home_local[1024] = "";
    const char *home = getenv("HOME");
    if (home && *home) { snprintf(home_local, sizeof home_local, "%s/.local", home); prefixes[2] = home_local; }
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        if (!prefixes[i] || !*prefixes[i]) continue;
        static const char *const sub[] = {
            "site-packages/nvidia/cu13/lib", "dist-packages/nvidia/cu13/lib",
            "site-packages/nvidia/cusolver/lib", "dist-packages/nvidia/cusolver/lib",
        };
        for (size_t j = 0; j < sizeof sub / sizeof sub[0]; j++) {
            char pat[1200];
            snprintf(pat, sizeof pat, "%s/lib/python3*/%s", prefixes[i], sub[j]);
            if (s_glob(f, pat)) return true;
        }
    }
    return s_glob(f, "/usr/lib/python3/dist-packages/nvidia/cu13/lib") ||
           s_glob(f, "/usr/lib/python3/dist-packages/nvidia/cusolver/lib");
}

extern "C" void rgpu_cusolver_unload(rgpu_cusolver *s) {
    if (s->params && s->DestroyParams) s->DestroyParams(s->params);
    free(s->hostbuf);
    if (s->handle && s->Destroy) s->Destroy(s->handle);
    if (s->lib) dlclose(s->lib);
    memset(s, 0, sizeof *s);
}

extern "C" bool rgpu_cusolver_load(rgpu_cusolver *s, const rgpu_cublas *blas, char *why, size_t whylen) {
    memset(s, 0, sizeof *s);
    sfinder f;
    memset(&f, 0, sizeof f);
    if (!find_cusolver(&f, blas)) {
        snprintf(why, whylen, "cuSOLVER not found (tried $RGPU_CUSOLVER_PATH, cuBLAS's folder, "
                              "libcusolver.so.12/.so.11/.so, /usr/local/cuda*/lib64, pip nvidia/{cu13,cusolver}/lib)%s%s",
                 f.last[0] ? "; last error: " : "", f.last);
        return false;
    }
    struct sym { const char *name; void **slot; };
    const sym syms[] = {
        { "cusolverDnCreate", (void **)&s->Create },
        { "cusolverDnDestroy", (void **)&s->Destroy },
        { "cusolverDnSetStream", (void **)&s->SetStream },
        { "cusolverDnDgetrf_bufferSize", (void **)&s->Dgetrf_bufferSize },
        { "cusolverDnDgetrf", (void **)&s->Dgetrf },
        { "cusolverDnDgetrs", (void **)&s->Dgetrs },
        { "cusolverDnDpotrf_bufferSize", (void **)&s->Dpotrf_bufferSize },
        { "cusolverDnDpotrf", (void **)&s->Dpotrf },
        { "cusolverDnDpotrs", (void **)&s->Dpotrs },
        { "cusolverDnDgeqrf_bufferSize", (void **)&s->Dgeqrf_bufferSize },
        { "cusolverDnDgeqrf", (void **)&s->Dgeqrf },
        { "cusolverDnDorgqr_bufferSize", (void **)&s->Dorgqr_bufferSize },
        { "cusolverDnDorgqr", (void **)&s->Dorgqr },
        { "cusolverDnDormqr_bufferSize", (void **)&s->Dormqr_bufferSize },
        { "cusolverDnDormqr", (void **)&s->Dormqr },
        { "cusolverDnDsyevd_bufferSize", (void **)&s->Dsyevd_bufferSize },
        { "cusolverDnDsyevd", (void **)&s->Dsyevd },
        { "cusolverDnDgesvd_bufferSize", (void **)&s->Dgesvd_bufferSize },
        { "cusolverDnDgesvd", (void **)&s->Dgesvd },
        { "cusolverDnZgetrf_bufferSize", (void **)&s->Zgetrf_bufferSize },
        { "cusolverDnZgetrf", (void **)&s->Zgetrf },
        { "cusolverDnZgetrs", (void **)&s->Zgetrs },
        { "cusolverDnZpotrf_bufferSize", (void **)&s->Zpotrf_bufferSize },
        { "cusolverDnZpotrf", (void **)&s->Zpotrf },
        { "cusolverDnZpotrs", (void **)&s->Zpotrs },
        { "cusolverDnZgeqrf_bufferSize", (void **)&s->Zgeqrf_bufferSize },
        { "cusolverDnZgeqrf", (void **)&s->Zgeqrf },
        { "cusolverDnZungqr_bufferSize", (void **)&s->Zungqr_bufferSize },
        { "cusolverDnZungqr", (void **)&s->Zungqr },
        { "cusolverDnZunmqr_bufferSize", (void **)&s->Zunmqr_bufferSize },
        { "cusolverDnZunmqr", (void **)&s->Zunmqr },
        { "cusolverDnZheevd_bufferSize", (void **)&s->Zheevd_bufferSize },
        { "cusolverDnZheevd", (void **)&s->Zheevd },
        { "cusolverDnZgesvd_bufferSize", (void **)&s->Zgesvd_bufferSize },
        { "cusolverDnZgesvd", (void **)&s->Zgesvd },
        { "cusolverDnDsytrf_bufferSize", (void **)&s->Dsytrf_bufferSize },
        { "cusolverDnDsytrf", (void **)&s->Dsytrf },
        { "cusolverDnZsytrf_bufferSize", (void **)&s->Zsytrf_bufferSize },
        { "cusolverDnZsytrf", (void **)&s->Zsytrf },
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        dlerror();
        *syms[i].slot = dlsym(f.lib, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(why, whylen, "%s has no %s (too old a cuSOLVER?)", f.path, syms[i].name);
            dlclose(f.lib);
            memset(s, 0, sizeof *s);
            return false;
        }
    }
    // optional (CUDA >= 12.6): all four or none
    const sym opt[] = {
        { "cusolverDnCreateParams", (void **)&s->CreateParams },
        { "cusolverDnDestroyParams", (void **)&s->DestroyParams },
        { "cusolverDnXgeev_bufferSize", (void **)&s->Xgeev_bufferSize },
        { "cusolverDnXgeev", (void **)&s->Xgeev },
    };
    bool all = true;
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++) {
        dlerror();
        *opt[i].slot = dlsym(f.lib, opt[i].name);
        all = all && *opt[i].slot;
    }
    if (!all)
        for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++) *opt[i].slot = NULL;
    s->lib = f.lib;
    snprintf(why, whylen, "cuSOLVER from %s", f.path);
    return true;
}
