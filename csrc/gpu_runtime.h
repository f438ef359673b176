// The GPU runtime the native library needs for ORT's device memory: allocation, pinned host
// memory and synchronous copies on one GPU. Loaded once, when ORT creates hipep's EP factories.
//
// The NVIDIA implementation is a table of driver entry points taken with dlopen from
// libcuda.so.1 (no link-time dependency: the library loads on machines without a driver). It
// uses each GPU's primary context, the one hipep.runtime.cuda (cuda-bindings) uses, so a pointer
// allocated here is a valid kernel argument there. An AMD table (libamdhip64) would implement the
// same interface.
//
// HIPEP_EMULATE_GPU_MEMORY=1 (tests only) swaps in an emulation: "device" memory is host memory
// that ORT is told is NVIDIA GPU memory, so ORT's side of device memory (EP devices, allocator,
// data transfer, IOBinding) can be exercised on machines without a GPU.
// HIPEP_EMULATE_GPU_MEMORY=addresses does the same but hands such tensors to Python as device
// addresses, for hipep's cuda device running on the host stand-in driver (hipep/tools/host_driver.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace hipep {

enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice, HostToHost };

class GpuRuntime {
 public:
  virtual ~GpuRuntime() = default;
  virtual const char* name() const = 0;  // "cuda", "emulated"
  virtual uint32_t vendor_id() const = 0;  // PCI vendor id: 0x10DE NVIDIA, 0x1002 AMD
  virtual int device_count() const = 0;
  // Whether "device" memory is in fact host memory the CPU can read (the emulation).
  virtual bool device_memory_is_host() const { return false; }
  // Its "device" addresses are host memory although tensors reach Python as device addresses
  // (HIPEP_EMULATE_GPU_MEMORY=addresses): only the host stand-in driver can take them.
  virtual bool addresses_are_host() const { return false; }
  // nullptr when the driver refuses (out of memory); `error` says why.
  virtual void* alloc(int ordinal, size_t nbytes, std::string& error) = 0;
  virtual void free(int ordinal, void* p) = 0;
  virtual void* alloc_host(int ordinal, size_t nbytes, std::string& error) = 0;  // pinned
  virtual void free_host(int ordinal, void* p) = 0;
  // Copies `nbytes` and returns once they have arrived; "" on success, else the driver's error.
  virtual std::string copy(int ordinal, void* dst, const void* src, size_t nbytes, CopyKind kind) = 0;
};

// The runtime of this machine: nullptr (with `why` saying why) when no GPU runtime loads or it
// reports no GPU. Called once per process.
std::unique_ptr<GpuRuntime> load_gpu_runtime(std::string& why);

// The process's runtime once ORT created the factories (nullptr before, or without a GPU), and why
// there is none.
GpuRuntime* gpu_runtime();
const std::string& gpu_runtime_absent_reason();
void set_gpu_runtime(std::unique_ptr<GpuRuntime> runtime, const std::string& why);

}  // namespace hipep
