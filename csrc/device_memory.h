// ORT's view of hipep's GPU memory: the memory infos an EP device carries, the allocator ORT
// allocates tensors with, and the data transfer it copies tensors with (IOBinding, feeds and
// fetches in host memory, OrtValue.numpy()). Counters for hipep.stats() and the leak checks.
#pragma once

#include <onnxruntime_c_api.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "gpu_runtime.h"

namespace hipep {

// Process-wide counts, read by hipep._native.memory_stats().
struct MemoryCounters {
  std::atomic<int64_t> device_in_use{0};    // bytes of device memory ORT holds from hipep's allocators
  std::atomic<int64_t> device_cached{0};    // freed blocks kept for reuse
  std::atomic<int64_t> device_reserved{0};  // bytes obtained from the driver and not yet returned
  std::atomic<int64_t> host_in_use{0};      // pinned host memory ORT holds
  std::atomic<int64_t> allocators{0};       // live allocators
  std::atomic<int64_t> transfer_bytes{0};   // bytes copied by CopyTensors
  std::atomic<int64_t> transfer_calls{0};   // tensors copied by CopyTensors
};
MemoryCounters& memory_counters();

// The memory infos of GPU `ordinal`: device memory (DEFAULT) and pinned host memory
// (HOST_ACCESSIBLE). Made once per ordinal, owned here for the process.
struct GpuMemoryInfos {
  OrtMemoryInfo* device = nullptr;
  OrtMemoryInfo* pinned = nullptr;
};
const GpuMemoryInfos& gpu_memory_infos(int ordinal);

// An OrtAllocator over the GPU runtime. cuMemFree synchronizes the device and ORT allocates output
// buffers every run, so freed blocks are kept in free lists by size class and go back to the
// driver only when ORT releases the allocator (or an allocation fails for lack of memory).
class CachingAllocator : public OrtAllocator {
 public:
  CachingAllocator(const OrtMemoryInfo* info, int ordinal, bool pinned);
  ~CachingAllocator();

 private:
  void* allocate(size_t size);
  void release(void* p);
  std::vector<std::pair<void*, size_t>> take_cached();  // empties the cache: (block, size class)
  void give_back(const std::vector<std::pair<void*, size_t>>& blocks);  // to the driver
  static size_t size_class(size_t size);

  const OrtMemoryInfo* info_;
  int ordinal_;
  bool pinned_;
  std::mutex mutex_;
  // size class -> cached blocks. A run takes the lowest free addresses of a class whatever order
  // the last run freed them in, so a replay finds the same output pointers (no rebinding).
  std::map<size_t, std::set<void*>> free_;
  std::map<void*, size_t> live_;               // block -> its size class
};

// Copies between host memory and GPU memory, and within a GPU, for ORT. Copies are synchronous:
// hipep's EP is not stream aware, so ORT passes no streams (or NULL ones).
struct GpuDataTransfer : OrtDataTransferImpl {
  GpuDataTransfer();
};

}  // namespace hipep
