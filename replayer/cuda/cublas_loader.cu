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
#include "lib_finder.cuh"

static const char *const SONAMES[] = { "libcublas.so.13", "libcublas.so.12", "libcublas.so" };

static bool find_cublas(rgpu_lib_finder *f) {
    return rgpu_lf_env(f, "RGPU_CUBLAS_PATH") || rgpu_lf_system(f) || rgpu_lf_wheels(f, "cublas");
}

extern "C" void rgpu_cublas_unload(rgpu_cublas *b) {
    if (b->lib) dlclose(b->lib);
    memset(b, 0, sizeof *b);
}

extern "C" bool rgpu_cublas_load(rgpu_cublas *b, char *why, size_t whylen) {
    memset(b, 0, sizeof *b);
    rgpu_lib_finder f;
    rgpu_lf_init(&f, SONAMES, sizeof SONAMES / sizeof SONAMES[0], "libcublas.so", "libcublasLt.so");
    if (!find_cublas(&f))
        return rgpu_lf_not_found(&f, "cuBLAS", "$RGPU_CUBLAS_PATH, libcublas.so.13/.so.12/.so, "
                                 "/usr/local/cuda*/lib64, pip nvidia/{cu13,cublas}/lib", why, whylen);
    const rgpu_lf_sym syms[] = {
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
    if (!rgpu_lf_bind_all(&f, syms, sizeof syms / sizeof syms[0], "cuBLAS", why, whylen)) {
        memset(b, 0, sizeof *b);
        return false;
    }
    b->lib = f.lib;
    b->handle = NULL;
    snprintf(why, whylen, "cuBLAS from %s", f.path);
    return true;
}
