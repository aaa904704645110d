/* emu_io.h - host <-> "device" copies for the kernel tests that run in the
 * CPU stand-in (emu_attention.cu, emu_copies.cu): bytes to a fresh device
 * buffer, and a device buffer's bytes back once the stream has run. */
#ifndef EMU_IO_H
#define EMU_IO_H

#include <vector>

static void *to_dev(const std::vector<unsigned char> &h)
{
    void *d;
    mp_cu_ok(cudaMalloc(&d, h.size()), "cudaMalloc");
    mp_cu_ok(cudaMemcpyAsync(d, h.data(), h.size(), cudaMemcpyHostToDevice, mp_cu.st), "copy");
    return d;
}

static std::vector<unsigned char> to_host(const void *d, size_t bytes)
{
    std::vector<unsigned char> h(bytes);
    mp_cu_ok(cudaMemcpyAsync(h.data(), d, bytes, cudaMemcpyDeviceToHost, mp_cu.st), "copy");
    mp_cu_ok(cudaStreamSynchronize(mp_cu.st), "sync");
    return h;
}

#endif
