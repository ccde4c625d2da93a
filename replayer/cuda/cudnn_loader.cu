// cudnn_loader.cu — finds cuDNN at run time (dlopen), as cublas_loader.cu
// finds cuBLAS, so the backend builds and links without cuDNN and runs
// convolution and batch norm on it wherever a cuDNN 9 (or 8) can be found;
// without one, conv.cu's im2col + cuBLAS path and batchnorm.cu's kernels run.
//
// Where it looks, in order:
//   1. $RGPU_CUDNN_PATH: ':'-separated files or folders (a folder is searched
//      for libcudnn.so.9, .so.8, .so);
//   2. the loader's search (LD_LIBRARY_PATH, ld.so.cache, this binary's
//      RUNPATH): libcudnn.so.9, .so.8, .so; then the CUDA toolkit folders;
//   3. pip wheels (nvidia-cudnn-cu13 / -cu12, as PyTorch installs them):
//      <prefix>/lib/python3*/{site,dist}-packages/nvidia/{cu13,cudnn}/lib.
// cuDNN 9's libcudnn.so.9 is the shim that exports the whole API and opens
// its sub-libraries (libcudnn_cnn, libcudnn_ops, ...) from its own folder.
#include "common.cuh"
#include "dnn.cuh"
#include "lib_finder.cuh"

static const char *const SONAMES[] = { "libcudnn.so.9", "libcudnn.so.8", "libcudnn.so" };

extern "C" void rgpu_cudnn_unload(rgpu_cudnn *d) {
    rgpu_cuda_conv_cache_free(d);
    if (d->handle && d->Destroy) d->Destroy(d->handle);
    if (d->lib) dlclose(d->lib);
    memset(d, 0, sizeof *d);
}

extern "C" bool rgpu_cudnn_load(rgpu_cudnn *d, char *why, size_t whylen) {
    memset(d, 0, sizeof *d);
    rgpu_lib_finder f;
    rgpu_lf_init(&f, SONAMES, sizeof SONAMES / sizeof SONAMES[0], NULL, NULL);
    if (!(rgpu_lf_env(&f, "RGPU_CUDNN_PATH") || rgpu_lf_system(&f) || rgpu_lf_wheels(&f, "cudnn")))
        return rgpu_lf_not_found(&f, "cuDNN", "$RGPU_CUDNN_PATH, libcudnn.so.9/.so.8/.so, /usr/local/cuda*/lib64, "
                                 "pip nvidia/{cu13,cudnn}/lib", why, whylen);
    const rgpu_lf_sym syms[] = {
        { "cudnnGetVersion", (void **)&d->GetVersion },
        { "cudnnGetErrorString", (void **)&d->GetErrorString },
        { "cudnnCreate", (void **)&d->Create },
        { "cudnnDestroy", (void **)&d->Destroy },
        { "cudnnSetStream", (void **)&d->SetStream },
        { "cudnnCreateTensorDescriptor", (void **)&d->CreateTensorDescriptor },
        { "cudnnDestroyTensorDescriptor", (void **)&d->DestroyTensorDescriptor },
        { "cudnnSetTensorNdDescriptor", (void **)&d->SetTensorNdDescriptor },
        { "cudnnCreateFilterDescriptor", (void **)&d->CreateFilterDescriptor },
        { "cudnnDestroyFilterDescriptor", (void **)&d->DestroyFilterDescriptor },
        { "cudnnSetFilterNdDescriptor", (void **)&d->SetFilterNdDescriptor },
        { "cudnnCreateConvolutionDescriptor", (void **)&d->CreateConvolutionDescriptor },
        { "cudnnDestroyConvolutionDescriptor", (void **)&d->DestroyConvolutionDescriptor },
        { "cudnnSetConvolutionNdDescriptor", (void **)&d->SetConvolutionNdDescriptor },
        { "cudnnSetConvolutionGroupCount", (void **)&d->SetConvolutionGroupCount },
        { "cudnnSetConvolutionMathType", (void **)&d->SetConvolutionMathType },
        { "cudnnGetConvolutionForwardAlgorithm_v7", (void **)&d->GetConvolutionForwardAlgorithm_v7 },
        { "cudnnGetConvolutionBackwardDataAlgorithm_v7", (void **)&d->GetConvolutionBackwardDataAlgorithm_v7 },
        { "cudnnGetConvolutionBackwardFilterAlgorithm_v7", (void **)&d->GetConvolutionBackwardFilterAlgorithm_v7 },
        { "cudnnConvolutionForward", (void **)&d->ConvolutionForward },
        { "cudnnConvolutionBackwardData", (void **)&d->ConvolutionBackwardData },
        { "cudnnConvolutionBackwardFilter", (void **)&d->ConvolutionBackwardFilter },
        { "cudnnDeriveBNTensorDescriptor", (void **)&d->DeriveBNTensorDescriptor },
        { "cudnnBatchNormalizationForwardTraining", (void **)&d->BatchNormalizationForwardTraining },
        { "cudnnBatchNormalizationForwardInference", (void **)&d->BatchNormalizationForwardInference },
        { "cudnnBatchNormalizationBackward", (void **)&d->BatchNormalizationBackward },
    };
    if (!rgpu_lf_bind_all(&f, syms, sizeof syms / sizeof syms[0], "cuDNN", why, whylen)) {
        memset(d, 0, sizeof *d);
        return false;
    }
    d->lib = f.lib;
    size_t v = d->GetVersion();   // 9.x.y: 90000 + 100 x + y; 8.x.y: 8000 + 100 x + y
    if (v >= 90000) snprintf(why, whylen, "cuDNN %zu.%zu.%zu from %s", v / 10000, v / 100 % 100, v % 100, f.path);
    else snprintf(why, whylen, "cuDNN %zu.%zu.%zu from %s", v / 1000, v / 100 % 10, v % 100, f.path);
    return true;
}

// dnn.cuh
bool rgpu_cuda_dnn_ready(rgpu_cuda_ctx *c)
{
    rgpu_cudnn *D = &c->dnn;
    if (D->handle) return true;
    if (D->tried) return false;
    char why[sizeof D->why];
    const char *env = getenv("RGPU_CUDNN");
    if (env && !strcmp(env, "0")) {
        snprintf(why, sizeof why, "RGPU_CUDNN=0");
    } else if (rgpu_cudnn_load(D, why, sizeof why)) {
        void *h = NULL;
        int s = D->Create(&h);
        if (s == 0 && (s = D->SetStream(h, c->stream)) != 0) D->Destroy(h);
        if (s == 0) {
            D->handle = h;
        } else {
            char lib[200];
            snprintf(lib, sizeof lib, "%.199s", why);
            snprintf(why, sizeof why, "%.199s: cudnnCreate/cudnnSetStream failed: %.120s (cudnnStatus %d)", lib,
                     D->GetErrorString(s), s);
            rgpu_cudnn_unload(D);
        }
    }
    D->tried = true;
    snprintf(D->why, sizeof D->why, "%s", why);
    if (D->handle) fprintf(stderr, "rgpu cuda: convolution and batch norm on %s\n", D->why);
    else fprintf(stderr, "rgpu cuda: %s: convolution on im2col + cuBLAS, batch norm on rgpu's kernels\n", D->why);
    return D->handle != NULL;
}
