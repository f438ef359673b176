// hipep's GPU memory as ORT sees it: memory infos, the caching allocator, the data transfer.
#include "device_memory.h"

#include <pybind11/pybind11.h>

#include <cstring>
#include <memory>
#include <string>

#include "ort_api.h"
#include "plugin.h"

namespace hipep {

MemoryCounters& memory_counters() {
  static MemoryCounters counters;
  return counters;
}

// ---- memory infos ------------------------------------------------------------------------------

const GpuMemoryInfos& gpu_memory_infos(int ordinal) {
  static std::mutex mutex;
  static std::map<int, GpuMemoryInfos> infos;  // kept for the process: EP devices point at them
  std::lock_guard<std::mutex> lock(mutex);
  auto it = infos.find(ordinal);
  if (it != infos.end()) return it->second;
  GpuMemoryInfos made;
  uint32_t vendor = gpu_runtime() ? gpu_runtime()->vendor_id() : 0;
  // Pinned memory carries the GPU's device type and id with the HOST_ACCESSIBLE memory type: it
  // is host memory the GPU reaches, tied to that GPU.
  HIPEP_ORT(g_ort->CreateMemoryInfo_V2(kDeviceMemoryName, OrtMemoryInfoDeviceType_GPU, vendor, ordinal,
                                       OrtDeviceMemoryType_DEFAULT, 0, OrtDeviceAllocator, &made.device));
  OrtStatus* st = g_ort->CreateMemoryInfo_V2(kPinnedMemoryName, OrtMemoryInfoDeviceType_GPU, vendor, ordinal,
                                             OrtDeviceMemoryType_HOST_ACCESSIBLE, 0, OrtDeviceAllocator,
                                             &made.pinned);
  if (st != nullptr) {
    g_ort->ReleaseMemoryInfo(made.device);
    throw_on_error(st);
  }
  return infos.emplace(ordinal, made).first->second;
}

// ---- the allocator -----------------------------------------------------------------------------

namespace {

namespace py = pybind11;

// Keeps a driver call that may synchronize the device (allocating, freeing) out of CUDA graph
// captures: while a stream of the context captures, such a call fails and spoils the capture.
// hipep.runtime.cuda holds its device's `_capture_lock` while it captures and around its own
// allocations; the allocator takes the same lock, when that device exists in this process.
class OutsideCaptures {
 public:
  explicit OutsideCaptures(int ordinal) {
    if (gpu_runtime() == nullptr || gpu_runtime()->device_memory_is_host() || !python_usable()) return;
    py::gil_scoped_acquire gil;
    try {
      py::object module = py::module_::import("sys").attr("modules").attr("get")("hipep.runtime.cuda");
      if (module.is_none()) return;  // no CUDA device in Python: nothing captures
      py::object device = module.attr("_DEVICES").attr("get")(ordinal);
      if (device.is_none()) return;
      py::object lock = device.attr("_capture_lock");
      lock.attr("acquire")();  // waits with the GIL released
      lock_ = std::move(lock);
    } catch (py::error_already_set&) {
      // a half-torn-down interpreter: allocate without the lock
    }
  }
  ~OutsideCaptures() {
    if (!lock_ || !python_usable()) return;
    py::gil_scoped_acquire gil;
    try {
      lock_.attr("release")();
    } catch (py::error_already_set&) {
    }
    lock_ = py::object();
  }
  OutsideCaptures(const OutsideCaptures&) = delete;
  OutsideCaptures& operator=(const OutsideCaptures&) = delete;

 private:
  py::object lock_;
};

}  // namespace

CachingAllocator::CachingAllocator(const OrtMemoryInfo* info, int ordinal, bool pinned)
    : info_(info), ordinal_(ordinal), pinned_(pinned) {
  std::memset(static_cast<OrtAllocator*>(this), 0, sizeof(OrtAllocator));
  version = kOrtApiVersion;
  Alloc = [](OrtAllocator* self, size_t size) noexcept -> void* {
    return static_cast<CachingAllocator*>(self)->allocate(size);
  };
  Reserve = Alloc;  // initializers: the same memory
  Free = [](OrtAllocator* self, void* p) noexcept { static_cast<CachingAllocator*>(self)->release(p); };
  Info = [](const OrtAllocator* self) noexcept -> const OrtMemoryInfo* {
    return static_cast<const CachingAllocator*>(self)->info_;
  };
  memory_counters().allocators++;
}

CachingAllocator::~CachingAllocator() {
  // Blocks ORT never freed are returned too: nothing may use an allocator's memory after its release.
  std::vector<std::pair<void*, size_t>> blocks = take_cached();
  for (auto& [p, cls] : live_) blocks.emplace_back(p, cls);
  auto& c = memory_counters();
  for (auto& [p, cls] : live_) (pinned_ ? c.host_in_use : c.device_in_use) -= static_cast<int64_t>(cls);
  live_.clear();
  give_back(blocks);
  c.allocators--;
}

size_t CachingAllocator::size_class(size_t size) {
  if (size <= 512) return 512;
  if (size <= (size_t(1) << 20)) {  // powers of two up to 1 MiB
    size_t c = 1024;
    while (c < size) c <<= 1;
    return c;
  }
  constexpr size_t step = size_t(2) << 20;  // then multiples of 2 MiB
  return (size + step - 1) / step * step;
}

// The allocator's mutex is never held across a driver call: those may wait for the GIL (see
// OutsideCaptures), and a thread holding the GIL may be waiting for the mutex.
void* CachingAllocator::allocate(size_t size) {
  if (size == 0) return nullptr;
  GpuRuntime* rt = gpu_runtime();
  if (rt == nullptr) return nullptr;
  size_t cls = size_class(size);
  auto& c = memory_counters();
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      p = *it->second.begin();
      it->second.erase(it->second.begin());
      if (!pinned_) c.device_cached -= static_cast<int64_t>(cls);
      live_[p] = cls;
      (pinned_ ? c.host_in_use : c.device_in_use) += static_cast<int64_t>(cls);
      return p;
    }
  }
  std::string error;
  {
    OutsideCaptures guard(ordinal_);
    p = pinned_ ? rt->alloc_host(ordinal_, cls, error) : rt->alloc(ordinal_, cls, error);
  }
  if (p == nullptr) {  // out of memory: give the cache back and try once more
    std::vector<std::pair<void*, size_t>> cached = take_cached();
    if (cached.empty()) return nullptr;  // ORT reports the failed allocation with its size
    give_back(cached);
    error.clear();
    OutsideCaptures guard(ordinal_);
    p = pinned_ ? rt->alloc_host(ordinal_, cls, error) : rt->alloc(ordinal_, cls, error);
    if (p == nullptr) return nullptr;
  }
  if (!pinned_) c.device_reserved += static_cast<int64_t>(cls);
  std::lock_guard<std::mutex> lock(mutex_);
  live_[p] = cls;
  (pinned_ ? c.host_in_use : c.device_in_use) += static_cast<int64_t>(cls);
  return p;
}

void CachingAllocator::release(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(p);
  if (it == live_.end()) return;  // not ours: ignoring it beats freeing foreign memory
  size_t cls = it->second;
  live_.erase(it);
  auto& c = memory_counters();
  (pinned_ ? c.host_in_use : c.device_in_use) -= static_cast<int64_t>(cls);
  free_[cls].insert(p);
  if (!pinned_) c.device_cached += static_cast<int64_t>(cls);
}

std::vector<std::pair<void*, size_t>> CachingAllocator::take_cached() {
  std::vector<std::pair<void*, size_t>> blocks;
  std::lock_guard<std::mutex> lock(mutex_);
  auto& c = memory_counters();
  for (auto& [cls, set] : free_) {
    for (void* p : set) {
      blocks.emplace_back(p, cls);
      if (!pinned_) c.device_cached -= static_cast<int64_t>(cls);
    }
  }
  free_.clear();
  return blocks;
}

void CachingAllocator::give_back(const std::vector<std::pair<void*, size_t>>& blocks) {
  if (blocks.empty()) return;
  GpuRuntime* rt = gpu_runtime();
  auto& c = memory_counters();
  OutsideCaptures guard(ordinal_);
  for (auto& [p, cls] : blocks) {
    if (rt) pinned_ ? rt->free_host(ordinal_, p) : rt->free(ordinal_, p);
    if (!pinned_) c.device_reserved -= static_cast<int64_t>(cls);
  }
}

// ---- the data transfer -------------------------------------------------------------------------

namespace {

// GPU memory of hipep's runtime (DEFAULT memory type); pinned memory counts as host memory.
bool is_gpu_memory(const OrtMemoryDevice* md) {
  return g_ep_api->MemoryDevice_GetDeviceType(md) == OrtMemoryInfoDeviceType_GPU &&
         g_ep_api->MemoryDevice_GetMemoryType(md) == OrtDeviceMemoryType_DEFAULT;
}

bool is_ours(const OrtMemoryDevice* md) {
  GpuRuntime* rt = gpu_runtime();
  return rt != nullptr && g_ep_api->MemoryDevice_GetDeviceType(md) == OrtMemoryInfoDeviceType_GPU &&
         g_ep_api->MemoryDevice_GetVendorId(md) == rt->vendor_id() &&
         static_cast<int>(g_ep_api->MemoryDevice_GetDeviceId(md)) < rt->device_count();
}

bool is_host(const OrtMemoryDevice* md) {
  return g_ep_api->MemoryDevice_GetDeviceType(md) == OrtMemoryInfoDeviceType_CPU || (is_ours(md) && !is_gpu_memory(md));
}

bool can_copy(const OrtDataTransferImpl*, const OrtMemoryDevice* src, const OrtMemoryDevice* dst) noexcept {
  // Copies that involve this GPU's memory or its pinned host memory (ORT's CPU copy takes only
  // memory of the CPU device type); plain host to host is ORT's own.
  if (!is_ours(src) && !is_ours(dst)) return false;
  bool src_gpu = is_ours(src) && is_gpu_memory(src);
  bool dst_gpu = is_ours(dst) && is_gpu_memory(dst);
  return (src_gpu || is_host(src)) && (dst_gpu || is_host(dst));
}

OrtStatus* copy_tensors(OrtDataTransferImpl*, const OrtValue** src_tensors, OrtValue** dst_tensors,
                        OrtSyncStream** /*streams: none, the EP is not stream aware*/, size_t count) noexcept {
  GpuRuntime* rt = gpu_runtime();
  if (rt == nullptr) return make_status(ORT_FAIL, "hipep: a device copy was asked for, but no GPU runtime is loaded");
  auto& c = memory_counters();
  for (size_t i = 0; i < count; ++i) {
    const OrtMemoryDevice* src_md = g_ep_api->Value_GetMemoryDevice(src_tensors[i]);
    const OrtMemoryDevice* dst_md = g_ep_api->Value_GetMemoryDevice(dst_tensors[i]);
    if (src_md == nullptr || dst_md == nullptr)
      return make_status(ORT_INVALID_ARGUMENT, "hipep: data transfer: tensor " + std::to_string(i) +
                                                   " is not a tensor (only tensors are copied)");
    size_t src_bytes = 0, dst_bytes = 0;
    OrtStatus* st = g_ort->GetTensorSizeInBytes(src_tensors[i], &src_bytes);
    if (st == nullptr) st = g_ort->GetTensorSizeInBytes(dst_tensors[i], &dst_bytes);
    if (st != nullptr) return st;
    if (src_bytes != dst_bytes)
      return make_status(ORT_INVALID_ARGUMENT, "hipep: data transfer: tensor " + std::to_string(i) + " has " +
                                                   std::to_string(src_bytes) + " bytes, its destination " +
                                                   std::to_string(dst_bytes));
    const void* src = nullptr;
    void* dst = nullptr;
    st = g_ort->GetTensorData(src_tensors[i], &src);
    if (st == nullptr) st = g_ort->GetTensorMutableData(dst_tensors[i], &dst);
    if (st != nullptr) return st;
    bool src_gpu = is_gpu_memory(src_md), dst_gpu = is_gpu_memory(dst_md);
    CopyKind kind = src_gpu ? (dst_gpu ? CopyKind::DeviceToDevice : CopyKind::DeviceToHost)
                            : (dst_gpu ? CopyKind::HostToDevice : CopyKind::HostToHost);
    int ordinal = static_cast<int>(g_ep_api->MemoryDevice_GetDeviceId(src_gpu ? src_md : dst_md));
    std::string error = rt->copy(ordinal, dst, src, src_bytes, kind);
    if (!error.empty()) return make_status(ORT_FAIL, "hipep: data transfer: " + error);
    c.transfer_bytes += static_cast<int64_t>(src_bytes);
    c.transfer_calls++;
  }
  return nullptr;
}

}  // namespace

GpuDataTransfer::GpuDataTransfer() {
  std::memset(static_cast<OrtDataTransferImpl*>(this), 0, sizeof(OrtDataTransferImpl));
  ort_version_supported = kOrtApiVersion;
  Release = [](OrtDataTransferImpl*) noexcept {};  // the factory owns it
  CanCopy = can_copy;
  CopyTensors = copy_tensors;
}

}  // namespace hipep
