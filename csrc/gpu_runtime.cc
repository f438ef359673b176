// GPU runtimes behind hipep's device memory: the NVIDIA driver table (dlopen) and the test
// emulation. See gpu_runtime.h.
#include "gpu_runtime.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <vector>

namespace hipep {

namespace {

// ---- NVIDIA: the driver API through dlopen ------------------------------------------------------

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUstream = void*;
using CUdeviceptr = unsigned long long;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr unsigned CU_STREAM_NON_BLOCKING = 1;

// The entry points hipep uses, by their versioned names (the unversioned ones are the CUDA 3.x
// ABI the driver keeps for old binaries).
struct CudaDriverTable {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext*);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemAllocHost)(void**, size_t);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuGetErrorName)(CUresult, const char**);
};

class CudaRuntime : public GpuRuntime {
 public:
  static std::unique_ptr<CudaRuntime> load(std::string& why) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      why = std::string("the NVIDIA driver library libcuda.so.1 does not load") + (e ? std::string(": ") + e : "");
      return nullptr;
    }
    CudaDriverTable t{};
    const char* missing = nullptr;
    auto sym = [&](auto& fn, const char* name) {
      void* p = dlsym(lib, name);
      if (p == nullptr && missing == nullptr) missing = name;
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    sym(t.cuInit, "cuInit");
    sym(t.cuDeviceGetCount, "cuDeviceGetCount");
    sym(t.cuDeviceGet, "cuDeviceGet");
    sym(t.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    sym(t.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    sym(t.cuCtxPushCurrent, "cuCtxPushCurrent_v2");
    sym(t.cuCtxPopCurrent, "cuCtxPopCurrent_v2");
    sym(t.cuMemAlloc, "cuMemAlloc_v2");
    sym(t.cuMemFree, "cuMemFree_v2");
    sym(t.cuMemAllocHost, "cuMemAllocHost_v2");
    sym(t.cuMemFreeHost, "cuMemFreeHost");
    sym(t.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
    sym(t.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
    sym(t.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
    sym(t.cuStreamCreate, "cuStreamCreate");
    sym(t.cuStreamSynchronize, "cuStreamSynchronize");
    sym(t.cuGetErrorName, "cuGetErrorName");
    if (missing != nullptr) {
      why = std::string("libcuda.so.1 lacks ") + missing + " (driver too old)";
      dlclose(lib);
      return nullptr;
    }
    std::unique_ptr<CudaRuntime> rt(new CudaRuntime(lib, t));
    CUresult r = t.cuInit(0);
    if (r != CUDA_SUCCESS) {
      why = "cuInit failed: " + rt->error_name(r);
      return nullptr;
    }
    int count = 0;
    r = t.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count <= 0) {
      why = r != CUDA_SUCCESS ? "cuDeviceGetCount failed: " + rt->error_name(r) : "the NVIDIA driver reports no GPU";
      return nullptr;
    }
    for (int i = 0; i < count; ++i) rt->devices_.push_back(std::make_unique<Device>());
    return rt;
  }

  ~CudaRuntime() override {
    // The contexts are retained for the process: the Python side shares them, and at exit the
    // driver may already be shutting down. Only the library handle is kept open too.
  }

  const char* name() const override { return "cuda"; }
  uint32_t vendor_id() const override { return 0x10DE; }
  int device_count() const override { return static_cast<int>(devices_.size()); }

  void* alloc(int ordinal, size_t nbytes, std::string& error) override {
    Scope scope(*this, ordinal, error);
    if (!scope.ok) return nullptr;
    CUdeviceptr p = 0;
    CUresult r = t_.cuMemAlloc(&p, nbytes);
    if (r != CUDA_SUCCESS) {
      error = "cuMemAlloc(" + std::to_string(nbytes) + ") failed: " + error_name(r);
      return nullptr;
    }
    return reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  }

  void free(int ordinal, void* p) override {
    std::string error;
    Scope scope(*this, ordinal, error);
    if (scope.ok) t_.cuMemFree(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)));
  }

  void* alloc_host(int ordinal, size_t nbytes, std::string& error) override {
    Scope scope(*this, ordinal, error);
    if (!scope.ok) return nullptr;
    void* p = nullptr;
    CUresult r = t_.cuMemAllocHost(&p, nbytes);
    if (r != CUDA_SUCCESS) {
      error = "cuMemAllocHost(" + std::to_string(nbytes) + ") failed: " + error_name(r);
      return nullptr;
    }
    return p;
  }

  void free_host(int ordinal, void* p) override {
    std::string error;
    Scope scope(*this, ordinal, error);
    if (scope.ok) t_.cuMemFreeHost(p);
  }

  std::string copy(int ordinal, void* dst, const void* src, size_t nbytes, CopyKind kind) override {
    if (nbytes == 0) return "";
    if (kind == CopyKind::HostToHost) {
      std::memcpy(dst, src, nbytes);
      return "";
    }
    std::string error;
    Scope scope(*this, ordinal, error);
    if (!scope.ok) return error;
    // On the device's own non-blocking stream, waited for: the legacy stream would not order a
    // device-to-device copy before hipep's streams' work, and a context-wide sync would fail
    // while another thread's stream captures a CUDA graph.
    Device& dev = *devices_[ordinal];
    std::lock_guard<std::mutex> lock(dev.copy_mutex);
    if (dev.copy_stream == nullptr) {
      CUresult r = t_.cuStreamCreate(&dev.copy_stream, CU_STREAM_NON_BLOCKING);
      if (r != CUDA_SUCCESS) return "cuStreamCreate failed: " + error_name(r);
    }
    auto d = [](const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); };
    CUresult r = CUDA_SUCCESS;
    const char* what = "";
    switch (kind) {
      case CopyKind::HostToDevice:
        r = t_.cuMemcpyHtoDAsync(d(dst), src, nbytes, dev.copy_stream);
        what = "cuMemcpyHtoDAsync";
        break;
      case CopyKind::DeviceToHost:
        r = t_.cuMemcpyDtoHAsync(dst, d(src), nbytes, dev.copy_stream);
        what = "cuMemcpyDtoHAsync";
        break;
      default:
        r = t_.cuMemcpyDtoDAsync(d(dst), d(src), nbytes, dev.copy_stream);
        what = "cuMemcpyDtoDAsync";
        break;
    }
    if (r == CUDA_SUCCESS) {
      r = t_.cuStreamSynchronize(dev.copy_stream);
      if (r != CUDA_SUCCESS) what = "cuStreamSynchronize";
    }
    if (r != CUDA_SUCCESS)
      return std::string(what) + " of " + std::to_string(nbytes) + " bytes failed: " + error_name(r);
    return "";
  }

 private:
  struct Device {
    bool retained = false;
    CUcontext ctx = nullptr;
    CUstream copy_stream = nullptr;
    std::mutex copy_mutex;
  };

  // Makes GPU `ordinal`'s primary context current for one call, restoring the caller's after.
  struct Scope {
    CudaRuntime& rt;
    bool ok = false;
    Scope(CudaRuntime& r, int ordinal, std::string& error) : rt(r) {
      CUcontext ctx = rt.context(ordinal, error);
      if (ctx == nullptr) return;
      CUresult res = rt.t_.cuCtxPushCurrent(ctx);
      if (res != CUDA_SUCCESS) {
        error = "cuCtxPushCurrent failed: " + rt.error_name(res);
        return;
      }
      ok = true;
    }
    ~Scope() {
      if (ok) {
        CUcontext popped = nullptr;
        rt.t_.cuCtxPopCurrent(&popped);
      }
    }
  };

  CudaRuntime(void* lib, const CudaDriverTable& t) : lib_(lib), t_(t) {}

  CUcontext context(int ordinal, std::string& error) {
    if (ordinal < 0 || ordinal >= device_count()) {
      error = "GPU " + std::to_string(ordinal) + " does not exist (the driver reports " +
              std::to_string(device_count()) + ")";
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(init_mutex_);
    Device& dev = *devices_[ordinal];
    if (!dev.retained) {
      CUdevice handle = 0;
      CUresult r = t_.cuDeviceGet(&handle, ordinal);
      if (r == CUDA_SUCCESS) r = t_.cuDevicePrimaryCtxRetain(&dev.ctx, handle);
      if (r != CUDA_SUCCESS) {
        error = "retaining GPU " + std::to_string(ordinal) + "'s primary context failed: " + error_name(r);
        return nullptr;
      }
      dev.retained = true;
    }
    return dev.ctx;
  }

  std::string error_name(CUresult r) const {
    const char* s = nullptr;
    if (t_.cuGetErrorName && t_.cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
    return "CUresult " + std::to_string(r);
  }

  void* lib_;
  CudaDriverTable t_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::mutex init_mutex_;
};

// ---- the emulation (tests): host memory presented to ORT as an NVIDIA GPU's ---------------------

// HIPEP_EMULATE_GPU_MEMORY=1: tensors in that memory reach Python as arrays, as host memory does.
// HIPEP_EMULATE_GPU_MEMORY=addresses: they reach Python as device addresses, as a GPU's do, for
// hipep's cuda device on the host stand-in driver (hipep/tools/host_driver.py), which takes a
// device address for a host one.
class EmulatedRuntime : public GpuRuntime {
 public:
  explicit EmulatedRuntime(bool addresses) : addresses_(addresses) {}
  const char* name() const override { return addresses_ ? "emulated-addresses" : "emulated"; }
  uint32_t vendor_id() const override { return 0x10DE; }
  int device_count() const override { return 1; }
  bool device_memory_is_host() const override { return !addresses_; }
  bool addresses_are_host() const override { return addresses_; }
  // Aligned as a GPU's allocations are (cuMemAlloc's are to at least 256 bytes): bindings choose
  // vector widths by alignment, and native replay follows tensors that keep their low 8 bits.
  void* alloc(int, size_t nbytes, std::string& error) override {
    size_t rounded = (std::max<size_t>(nbytes, 1) + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, rounded);
    if (p == nullptr) error = "aligned_alloc(256, " + std::to_string(rounded) + ") failed";
    return p;
  }
  void free(int, void* p) override { std::free(p); }
  void* alloc_host(int o, size_t nbytes, std::string& error) override { return alloc(o, nbytes, error); }
  void free_host(int o, void* p) override { free(o, p); }
  std::string copy(int, void* dst, const void* src, size_t nbytes, CopyKind) override {
    if (nbytes) std::memmove(dst, src, nbytes);
    return "";
  }

 private:
  bool addresses_;
};

std::unique_ptr<GpuRuntime> g_runtime;
std::string g_absent_reason = "ONNX Runtime has not loaded hipep's plugin in this process";

}  // namespace

std::unique_ptr<GpuRuntime> load_gpu_runtime(std::string& why) {
  const char* emulate = std::getenv("HIPEP_EMULATE_GPU_MEMORY");
  if (emulate != nullptr && std::strcmp(emulate, "1") == 0) return std::make_unique<EmulatedRuntime>(false);
  if (emulate != nullptr && std::strcmp(emulate, "addresses") == 0) return std::make_unique<EmulatedRuntime>(true);
  const char* off = std::getenv("HIPEP_NO_GPU_MEMORY");
  if (off != nullptr && std::strcmp(off, "1") == 0) {
    why = "HIPEP_NO_GPU_MEMORY=1";
    return nullptr;
  }
  return CudaRuntime::load(why);
}

GpuRuntime* gpu_runtime() { return g_runtime.get(); }
const std::string& gpu_runtime_absent_reason() { return g_absent_reason; }

void set_gpu_runtime(std::unique_ptr<GpuRuntime> runtime, const std::string& why) {
  g_runtime = std::move(runtime);
  g_absent_reason = g_runtime ? "" : why;
}

}  // namespace hipep
