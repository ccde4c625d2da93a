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
#include "lib_finder.cuh"

#include <link.h>

static const char *const SONAMES[] = { "libcusolver.so.12", "libcusolver.so.11", "libcusolver.so" };

static bool find_cusolver(rgpu_lib_finder *f, const rgpu_cublas *blas) {
    if (rgpu_lf_env(f, "RGPU_CUSOLVER_PATH")) return true;
    if (blas && blas->lib) {
        char origin[1024] = "";
        if (dlinfo(blas->lib, RTLD_DI_ORIGIN, origin) == 0 && origin[0] && rgpu_lf_dir(f, origin)) return true;
    }
    return rgpu_lf_system(f) || rgpu_lf_wheels(f, "cusolver");
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
    rgpu_lib_finder f;
    rgpu_lf_init(&f, SONAMES, sizeof SONAMES / sizeof SONAMES[0], NULL, NULL);
    if (!find_cusolver(&f, blas))
        return rgpu_lf_not_found(&f, "cuSOLVER", "$RGPU_CUSOLVER_PATH, cuBLAS's folder, libcusolver.so.12/.so.11/.so, "
                                 "/usr/local/cuda*/lib64, pip nvidia/{cu13,cusolver}/lib", why, whylen);
#define DZ_SYMS(d, z, args) { "cusolverDn" #d, (void **)&s->d }, { "cusolverDn" #z, (void **)&s->z },
    const rgpu_lf_sym syms[] = {
        { "cusolverDnCreate", (void **)&s->Create },
        { "cusolverDnDestroy", (void **)&s->Destroy },
        { "cusolverDnSetStream", (void **)&s->SetStream },
        RGPU_CUSOLVER_DZ(DZ_SYMS)
    };
#undef DZ_SYMS
    if (!rgpu_lf_bind_all(&f, syms, sizeof syms / sizeof syms[0], "cuSOLVER", why, whylen)) {
        memset(s, 0, sizeof *s);
        return false;
    }
    // optional (CUDA >= 12.6): all four or none
    const rgpu_lf_sym opt[] = {
        { "cusolverDnCreateParams", (void **)&s->CreateParams },
        { "cusolverDnDestroyParams", (void **)&s->DestroyParams },
        { "cusolverDnXgeev_bufferSize", (void **)&s->Xgeev_bufferSize },
        { "cusolverDnXgeev", (void **)&s->Xgeev },
    };
    rgpu_lf_bind(f.lib, opt, sizeof opt / sizeof opt[0], NULL);
    s->lib = f.lib;
    snprintf(why, whylen, "cuSOLVER from %s", f.path);
    return true;
}
