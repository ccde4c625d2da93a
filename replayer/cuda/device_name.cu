// device_name.cu — the name of CUDA device 0 for the backend's description
// ("cuda (NVIDIA H200)" in the handshake, rgpu.stats(), get_device_name()).
#include "common.cuh"

#include <string.h>

extern "C" void rgpu_cuda_device_name(char *out, size_t n) {
    if (!out || !n) return;
    out[0] = 0;
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    snprintf(out, n, "%s", p.name);
}
