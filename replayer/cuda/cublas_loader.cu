// cublas_loader.cu — finds cuBLAS at run time (dlopen), so the backend builds
// and links without cuBLAS headers or libraries and runs wherever a cuBLAS
// 13 or 12 can be found. Fills the function table of common.cuh.
//
// Where it looks, in order:
//   1. $RGPU_CUBLAS_PATH: ':'-separated files or folders (a folder is searched
//      for libcublas.so.13, .so.12, .so);
//   2. the loader's search (LD_LIBRARY_PATH, ld.so.cache, this binary's
//      RUNPATH, which points at the CUDA toolkit it was built with):
//      libcublas.so.13, libcublas.so.12, libcublas.so;
//   3. the CUDA toolkit folders (/usr/local/cuda*/lib64, /usr/lib/x86_64-linux-gnu);
//   4. pip wheels (nvidia-cublas / nvidia-cublas-cu12, as PyTorch installs
//      them): <prefix>/lib/python3*/{site,dist}-packages/nvidia/{cu13,cublas}/lib
//      for the prefixes $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr/local, /usr,
//      /opt/conda.
// A library opened by path gets its libcublasLt from the same folder first.
#include "common.cuh"

#include <dlfcn.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>

static const char *const SONAMES[] = { "libcublas.so.13", "libcublas.so.12", "libcublas.so" };

struct finder {
    void *lib;
    char path[1024];     // what was opened
    char last[400];      // dlerror of the last attempt that found a file
};

static bool file_exists(const char *p) {
    FILE *f = fopen(p, "rb");
    if (!f) return false;
    fclose(f);
    return true;
}

// dlopen a library given by path, its libcublasLt sibling first (same soname
// suffix) so the dependency resolves from the same folder.
static bool try_path(finder *f, const char *path) {
    if (f->lib || !file_exists(path)) return f->lib != NULL;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (slash && !strncmp(base, "libcublas.so", 12)) {
        char lt[1024];
        int dir = (int)(slash - path);
        snprintf(lt, sizeof lt, "%.*s/libcublasLt.so%s", dir, path, base + 12);
        if (file_exists(lt)) dlopen(lt, RTLD_NOW | RTLD_GLOBAL);   // kept open for the process's life
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(f->last, sizeof f->last, "%s", e ? e : path);
        return false;
    }
    f->lib = h;
    snprintf(f->path, sizeof f->path, "%s", path);
    return true;
}

// A soname through the dynamic loader's own search.
static bool try_soname(finder *f, const char *name) {
    if (f->lib) return true;
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        // "cannot open shared object file" is the common not-there case; keep
        // other reasons (wrong version of a dependency, ...) as they explain more
        if (e && !strstr(e, "cannot open shared object file")) snprintf(f->last, sizeof f->last, "%s", e);
        return false;
    }
    f->lib = h;
    snprintf(f->path, sizeof f->path, "%s", name);
    return true;
}

static bool try_dir(finder *f, const char *dir) {
    for (size_t i = 0; i < sizeof SONAMES / sizeof SONAMES[0] && !f->lib; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, SONAMES[i]);
        try_path(f, p);
    }
    return f->lib != NULL;
}

// Every folder matching pattern (glob), in sorted order, newest last: tried
// in reverse so the newest python/toolkit wins.
static bool try_glob_dirs(finder *f, const char *pattern) {
    if (f->lib) return true;
    glob_t g;
    memset(&g, 0, sizeof g);
    if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0)
        for (size_t i = g.gl_pathc; i-- > 0 && !f->lib;) try_dir(f, g.gl_pathv[i]);
    globfree(&g);
    return f->lib != NULL;
}

static bool find_cublas(finder *f) {
    const char *env = getenv("RGPU_CUBLAS_PATH");
    if (env && *env) {
        char buf[4096];
        snprintf(buf, sizeof buf, "%s", env);
        for (char *save = NULL, *tok = strtok_r(buf, ":", &save); tok && !f->lib; tok = strtok_r(NULL, ":", &save)) {
            if (!try_path(f, tok)) try_dir(f, tok);   // a file, else a folder
        }
        if (f->lib) return true;
    }
    for (size_t i = 0; i < sizeof SONAMES / sizeof SONAMES[0]; i++)
        if (try_soname(f, SONAMES[i])) return true;
    if (try_dir(f, "/usr/local/cuda/lib64") || try_glob_dirs(f, "/usr/local/cuda-*/lib64") ||
        try_glob_dirs(f, "/usr/local/cuda-*/targets/x86_64-linux/lib") || try_dir(f, "/usr/lib/x86_64-linux-gnu"))
        return true;
    const char *prefixes[] = { getenv("VIRTUAL_ENV"), getenv("CONDA_PREFIX"), NULL, "/usr/local", "/usr", "/opt/conda" };
    char home_local[1024] = "";
    const char *home = getenv("HOME");
    if (home && *home) { snprintf(home_local, sizeof home_local, "%s/.local", home); prefixes[2] = home_local; }
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        if (!prefixes[i] || !*prefixes[i]) continue;
        static const char *const sub[] = {
            "site-packages/nvidia/cu13/lib", "dist-packages/nvidia/cu13/lib",
            "site-packages/nvidia/cublas/lib", "dist-packages/nvidia/cublas/lib",
        };
        for (size_t j = 0; j < sizeof sub / sizeof sub[0]; j++) {
            char pat[1200];
            snprintf(pat, sizeof pat, "%s/lib/python3*/%s", prefixes[i], sub[j]);
            if (try_glob_dirs(f, pat)) return true;
        }
    }
    // Debian's python3-* packages
    return try_glob_dirs(f, "/usr/lib/python3/dist-packages/nvidia/cu13/lib") ||
           try_glob_dirs(f, "/usr/lib/python3/dist-packages/nvidia/cublas/lib");
}

extern "C" void rgpu_cublas_unload(rgpu_cublas *b) {
    if (b->lib) dlclose(b->lib);
    memset(b, 0, sizeof *b);
}

extern "C" bool rgpu_cublas_load(rgpu_cublas *b, char *why, size_t whylen) {
    memset(b, 0, sizeof *b);
    finder f;
    memset(&f, 0, sizeof f);
    if (!find_cublas(&f)) {
        snprintf(why, whylen, "cuBLAS not found (tried $RGPU_CUBLAS_PATH, libcublas.so.13/.so.12/.so, "
                              "/usr/local/cuda*/lib64, pip nvidia/{cu13,cublas}/lib)%s%s",
                 f.last[0] ? "; last error: " : "", f.last);
        return false;
    }
    struct sym { const char *name; void **slot; };
    const sym syms[] = {
        { "cublasCreate_v2", (void **)&b->Create },
        { "cublasDestroy_v2", (void **)&b->Destroy },
        { "cublasSetStream_v2", (void **)&b->SetStream },
        { "cublasSetMathMode", (void **)&b->SetMathMode },
        { "cublasSetWorkspace_v2", (void **)&b->SetWorkspace },
        { "cublasSgemmStridedBatched", (void **)&b->SgemmStridedBatched },
        { "cublasDgemmStridedBatched", (void **)&b->DgemmStridedBatched },
        { "cublasCgemmStridedBatched", (void **)&b->CgemmStridedBatched },
        { "cublasZgemmStridedBatched", (void **)&b->ZgemmStridedBatched },
        { "cublasGemmStridedBatchedEx", (void **)&b->GemmStridedBatchedEx },
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        dlerror();
        *syms[i].slot = dlsym(f.lib, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(why, whylen, "%s has no %s (too old a cuBLAS?)", f.path, syms[i].name);
            dlclose(f.lib);
            memset(b, 0, sizeof *b);
            return false;
        }
    }
    b->lib = f.lib;
    b->handle = NULL;
    snprintf(why, whylen, "cuBLAS from %s", f.path);
    return true;
}
