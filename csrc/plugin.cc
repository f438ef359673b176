// The ORT plugin-EP ABI: the factories and OrtEp (Compute's OrtNodeComputeInfo is compute.cc's).
// Decisions are made in Python (hipep.bridge): this file converts between ORT's C objects and
// Python, takes the GIL for every call into Python, and turns every Python exception into an
// OrtStatus carrying its message (python_glue.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compute.h"
#include "device_memory.h"
#include "gpu_runtime.h"
#include "graph_view.h"
#include "ort_api.h"
#include "plugin.h"
#include "python_glue.h"

namespace hipep {

const OrtApi* g_ort = nullptr;
const OrtEpApi* g_ep_api = nullptr;

void throw_on_error(OrtStatus* status) {
  if (status == nullptr) return;
  OrtErrorCode code = g_ort->GetErrorCode(status);
  std::string message = g_ort->GetErrorMessage(status);
  g_ort->ReleaseStatus(status);
  throw OrtError(code, message);
}

OrtStatus* make_status(OrtErrorCode code, const std::string& message) {
  return g_ort->CreateStatus(code, message.c_str());
}

bool python_usable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

namespace {

py::module_ bridge() { return py::module_::import("hipep.bridge"); }

void log(const OrtLogger* logger, OrtLoggingLevel level, const std::string& message) {
  if (logger == nullptr) return;
  OrtStatus* st = g_ort->Logger_LogMessage(logger, level, message.c_str(), ORT_FILE, __LINE__, "hipep");
  if (st) g_ort->ReleaseStatus(st);
}

// Python hands back log records as (severity, message) with ORT's severity numbers.
void log_records(const OrtLogger* logger, const py::handle& records) {
  for (auto rec : records) {
    auto t = rec.cast<py::tuple>();
    log(logger, static_cast<OrtLoggingLevel>(t[0].cast<int>()), utf8(t[1]));
  }
}

// ---- the EP ----------------------------------------------------------------------------------

struct HipEp : OrtEp {
  const OrtLogger* logger;
  std::unique_ptr<PyRef> state;  // hipep.bridge.EpState
  // Set when GetCapability found nodes that the 'strict' option forbids leaving to another EP,
  // or left function nodes for ORT to expand that ORT may run whole elsewhere (EpState.run_failure).
  // Only then does a run's start need Python, to raise that failure: every other run starts
  // without taking the GIL.
  std::atomic<bool> strict_failed{false};

  const char* ep_name;

  HipEp(const OrtLogger* l, py::object s, const char* name)
      : logger(l), state(new PyRef(std::move(s))), ep_name(name) {
    std::memset(static_cast<OrtEp*>(this), 0, sizeof(OrtEp));
    ort_version_supported = kOrtApiVersion;
    GetName = [](const OrtEp* self) noexcept -> const char* { return static_cast<const HipEp*>(self)->ep_name; };
    GetCapability = GetCapabilityImpl;
    Compile = CompileImpl;
    ReleaseNodeComputeInfos = ReleaseNodeComputeInfosImpl;
    OnRunStart = OnRunStartImpl;
  }

  static OrtStatus* ORT_API_CALL OnRunStartImpl(OrtEp* self_base, const OrtRunOptions*) noexcept {
    auto* self = static_cast<HipEp*>(self_base);
    if (!self->strict_failed.load(std::memory_order_acquire)) return nullptr;
    return guarded("starting a run", [&] { self->state->get().attr("on_run_start")(); });
  }

  static OrtStatus* ORT_API_CALL GetCapabilityImpl(OrtEp* self_base, const OrtGraph* graph,
                                                   OrtEpGraphSupportInfo* support) noexcept {
    auto* self = static_cast<HipEp*>(self_base);
    return guarded("GetCapability", [&] {
      std::vector<const OrtNode*> nodes;
      py::dict desc = describe_graph(graph, &nodes);
      desc["parent"] = describe_parent(graph);
      py::tuple result = self->state->get().attr("get_capability")(desc);
      if (!self->state->get().attr("run_failure").is_none())
        self->strict_failed.store(true, std::memory_order_release);
      log_records(self->logger, result[1]);
      OrtNodeFusionOptions fusion{};
      fusion.ort_version_supported = kOrtApiVersion;
      // hipep copies the constant initializers it reads during Compile (hipep.weights), so ORT
      // need not pass them to Compute and frees its own copy once the session is set up.
      fusion.drop_constant_initializers = true;
      for (auto cluster : result[0].cast<py::list>()) {
        std::vector<const OrtNode*> members;
        for (auto idx : cluster) members.push_back(nodes.at(idx.cast<size_t>()));
        if (members.empty()) continue;
        HIPEP_ORT(g_ep_api->EpGraphSupportInfo_AddNodesToFuse(support, members.data(), members.size(), &fusion));
      }
    });
  }

  static OrtStatus* ORT_API_CALL CompileImpl(OrtEp* self_base, const OrtGraph** graphs, const OrtNode** fused_nodes,
                                             size_t count, OrtNodeComputeInfo** infos,
                                             OrtNode** ep_context_nodes) noexcept {
    auto* self = static_cast<HipEp*>(self_base);
    for (size_t i = 0; i < count; ++i) infos[i] = nullptr;
    OrtStatus* st = guarded("Compile", [&] {
      for (size_t i = 0; i < count; ++i) {
        const char* fused_name = nullptr;
        HIPEP_ORT(g_ort->Node_GetName(fused_nodes[i], &fused_name));
        std::string name = fused_name ? fused_name : "hipep subgraph";
        // The OrtGraph (and every initializer value it hands out) dies with this call: the
        // weights are copied here, into arrays Python owns.
        py::dict desc = describe_graph(graphs[i], nullptr, /*copy_weights=*/true);
        std::vector<std::string> in_names = value_names(fused_nodes[i], false);
        std::vector<std::string> out_names = value_names(fused_nodes[i], true);
        py::tuple result = self->state->get().attr("compile")(desc, name, in_names, out_names);
        std::vector<ONNXTensorElementDataType> output_types;
        for (auto t : result[1].cast<py::list>())
          output_types.push_back(static_cast<ONNXTensorElementDataType>(t.cast<int>()));
        infos[i] = new_compute_info(name, result[0], std::move(output_types));
        log_records(self->logger, result[2]);
      }
    });
    if (st) {
      ReleaseNodeComputeInfosImpl(self_base, infos, count);
      for (size_t i = 0; i < count; ++i) infos[i] = nullptr;
    }
    (void)ep_context_nodes;
    return st;
  }

  static void ORT_API_CALL ReleaseNodeComputeInfosImpl(OrtEp*, OrtNodeComputeInfo** infos, size_t count) noexcept {
    for (size_t i = 0; i < count; ++i) delete_compute_info(infos[i]);
  }
};

// ---- the factories ---------------------------------------------------------------------------

// Two factories, one EP name each. HipExecutionProvider is hipep's best device: with a GPU
// runtime, one EP device per GPU carrying that GPU's memory infos (ORT then allocates the EP's
// inputs and outputs in device memory and copies through hipep's data transfer); without one,
// the CPU reference device in host memory. HipCpuExecutionProvider is always the CPU reference
// device in host memory: ORT requires the EP devices one EP is selected with to agree on memory,
// so on a GPU machine the host-memory device needs a name of its own.
struct HipEpFactory : OrtEpFactory {
  const char* ep_name;
  bool gpu;  // offers GPU memory (HipExecutionProvider with a GPU runtime loaded)
  std::unique_ptr<GpuDataTransfer> transfer;

  HipEpFactory(const char* name, bool offers_gpu) : ep_name(name), gpu(offers_gpu) {
    std::memset(static_cast<OrtEpFactory*>(this), 0, sizeof(OrtEpFactory));
    ort_version_supported = kOrtApiVersion;
    GetName = [](const OrtEpFactory* self) noexcept -> const char* {
      return static_cast<const HipEpFactory*>(self)->ep_name;
    };
    GetVendor = [](const OrtEpFactory*) noexcept -> const char* { return kVendor; };
    GetVendorId = [](const OrtEpFactory*) noexcept -> uint32_t { return 0; };
    GetVersion = [](const OrtEpFactory*) noexcept -> const char* { return kVersion; };
    GetSupportedDevices = GetSupportedDevicesImpl;
    CreateEp = CreateEpImpl;
    ReleaseEp = [](OrtEpFactory*, OrtEp* ep) noexcept { delete static_cast<HipEp*>(ep); };
    CreateAllocator = CreateAllocatorImpl;
    ReleaseAllocator = [](OrtEpFactory*, OrtAllocator* allocator) noexcept {
      delete static_cast<CachingAllocator*>(allocator);
    };
    CreateDataTransfer = [](OrtEpFactory* self, OrtDataTransferImpl** out) noexcept -> OrtStatus* {
      // Host memory only: ORT's own CPU copies suffice.
      *out = static_cast<HipEpFactory*>(self)->transfer.get();
      return nullptr;
    };
    if (gpu) transfer = std::make_unique<GpuDataTransfer>();
  }

  static OrtStatus* add_device(HipEpFactory* self, const OrtHardwareDevice* hw, int ordinal, OrtEpDevice** out) {
    OrtKeyValuePairs* metadata = nullptr;
    g_ort->CreateKeyValuePairs(&metadata);
    g_ort->AddKeyValuePair(metadata, "memory", self->gpu ? "gpu" : "host");
    if (self->gpu) {
      g_ort->AddKeyValuePair(metadata, "gpu_runtime", gpu_runtime()->name());
      g_ort->AddKeyValuePair(metadata, "gpu_ordinal", std::to_string(ordinal).c_str());
    }
    OrtEpDevice* dev = nullptr;
    OrtStatus* st = g_ep_api->CreateEpDevice(self, hw, metadata, nullptr, &dev);  // copies the metadata
    g_ort->ReleaseKeyValuePairs(metadata);
    if (st) return st;
    if (self->gpu) {
      try {
        const GpuMemoryInfos& infos = gpu_memory_infos(ordinal);
        st = g_ep_api->EpDevice_AddAllocatorInfo(dev, infos.device);
        if (!st) st = g_ep_api->EpDevice_AddAllocatorInfo(dev, infos.pinned);
      } catch (const OrtError& e) {
        st = make_status(e.code, std::string("hipep: memory info of GPU ") + std::to_string(ordinal) + ": " + e.what());
      }
      if (st) {
        g_ep_api->ReleaseEpDevice(dev);
        return st;
      }
    }
    *out = dev;
    return nullptr;
  }

  // With GPU memory: one EP device per GPU hardware device of the runtime's vendor that ORT
  // reports (GPU ordinals in ORT's order), or, where ORT reports none (a machine without
  // /sys/class/drm), one on the CPU hardware device for GPU 0. Host memory: the CPU device.
  static OrtStatus* ORT_API_CALL GetSupportedDevicesImpl(OrtEpFactory* self_base, const OrtHardwareDevice* const* devices,
                                                         size_t num_devices, OrtEpDevice** ep_devices,
                                                         size_t max_ep_devices, size_t* num_ep_devices) noexcept {
    auto* self = static_cast<HipEpFactory*>(self_base);
    *num_ep_devices = 0;
    if (self->gpu) {
      GpuRuntime* rt = gpu_runtime();
      int ordinal = 0;
      for (size_t i = 0; i < num_devices && *num_ep_devices < max_ep_devices && ordinal < rt->device_count(); ++i) {
        if (g_ort->HardwareDevice_Type(devices[i]) != OrtHardwareDeviceType_GPU ||
            g_ort->HardwareDevice_VendorId(devices[i]) != rt->vendor_id())
          continue;
        if (OrtStatus* st = add_device(self, devices[i], ordinal++, &ep_devices[*num_ep_devices])) return st;
        ++*num_ep_devices;
      }
      if (*num_ep_devices > 0) return nullptr;
    }
    for (size_t i = 0; i < num_devices && *num_ep_devices < max_ep_devices; ++i) {
      if (g_ort->HardwareDevice_Type(devices[i]) != OrtHardwareDeviceType_CPU) continue;
      if (OrtStatus* st = add_device(self, devices[i], 0, &ep_devices[*num_ep_devices])) return st;
      ++*num_ep_devices;
      break;
    }
    return nullptr;
  }

  static OrtStatus* ORT_API_CALL CreateAllocatorImpl(OrtEpFactory* self_base, const OrtMemoryInfo* memory_info,
                                                     const OrtKeyValuePairs*, OrtAllocator** allocator) noexcept {
    auto* self = static_cast<HipEpFactory*>(self_base);
    *allocator = nullptr;
    if (!self->gpu || memory_info == nullptr) return nullptr;  // host memory: ORT's CPU allocator
    const OrtMemoryDevice* md = g_ep_api->MemoryInfo_GetMemoryDevice(memory_info);
    int ordinal = static_cast<int>(g_ep_api->MemoryDevice_GetDeviceId(md));
    if (g_ep_api->MemoryDevice_GetDeviceType(md) != OrtMemoryInfoDeviceType_GPU || ordinal < 0 ||
        ordinal >= gpu_runtime()->device_count())
      return make_status(ORT_INVALID_ARGUMENT, std::string("hipep: ") + self->ep_name +
                                                   " was asked for an allocator of memory it does not offer");
    bool pinned = g_ep_api->MemoryDevice_GetMemoryType(md) == OrtDeviceMemoryType_HOST_ACCESSIBLE;
    try {
      const GpuMemoryInfos& infos = gpu_memory_infos(ordinal);
      *allocator = new CachingAllocator(pinned ? infos.pinned : infos.device, ordinal, pinned);
    } catch (const std::exception& e) {
      return make_status(ORT_FAIL, std::string("hipep: creating an allocator failed: ") + e.what());
    }
    return nullptr;
  }

  static OrtStatus* ORT_API_CALL CreateEpImpl(OrtEpFactory* self_base, const OrtHardwareDevice* const*,
                                              const OrtKeyValuePairs* const* ep_metadata, size_t num_devices,
                                              const OrtSessionOptions* session_options, const OrtLogger* logger,
                                              OrtEp** ep) noexcept {
    auto* self = static_cast<HipEpFactory*>(self_base);
    *ep = nullptr;
    return guarded("creating the execution provider", [&] {
      // The GPU whose memory ORT gives this EP (one per session: the selected devices agree).
      int ordinal = -1;
      for (size_t i = 0; self->gpu && i < num_devices; ++i) {
        const char* v = ep_metadata && ep_metadata[i] ? g_ort->GetKeyValue(ep_metadata[i], "gpu_ordinal") : nullptr;
        int o = v ? std::atoi(v) : 0;
        if (ordinal >= 0 && o != ordinal)
          throw std::runtime_error(std::string(self->ep_name) + " was selected with the EP devices of GPUs " +
                                   std::to_string(ordinal) + " and " + std::to_string(o) +
                                   "; a session runs on one GPU: select one EP device");
        ordinal = o;
      }
      OrtKeyValuePairs* kvps = nullptr;
      HIPEP_ORT(g_ort->GetSessionOptionsConfigEntries(session_options, &kvps));
      const char* const* keys = nullptr;
      const char* const* values = nullptr;
      size_t n = 0;
      g_ort->GetKeyValuePairs(kvps, &keys, &values, &n);
      py::dict config;
      for (size_t i = 0; i < n; ++i) config[py::str(keys[i])] = py::str(values[i]);
      g_ort->ReleaseKeyValuePairs(kvps);
      OrtLoggingLevel level = ORT_LOGGING_LEVEL_WARNING;
      HIPEP_ORT(g_ort->Logger_GetLoggingSeverityLevel(logger, &level));
      std::string memory = "host";
      if (self->gpu) memory = gpu_runtime()->device_memory_is_host() ? "emulated" : "gpu";
      // Compute hands Python an OutputAllocator, a type of hipep's module: importing it registers
      // the type, also where ORT loaded this library before Python imported it.
      py::module_::import("hipep._native");
      py::object state = bridge().attr("create_ep")(config, static_cast<int>(level), self->ep_name, memory,
                                                    ordinal < 0 ? 0 : ordinal);
      *ep = new HipEp(logger, state, self->ep_name);
    });
  }
};

}  // namespace


// Whether Python can run the GPU device on `runtime`'s memory (cuda-bindings imports, GPU 0 exists;
// for the emulation that hands host memory over as device addresses, the host stand-in driver is
// installed: a real GPU's kernels would fault on those addresses); else `why` not.
bool gpu_device_usable(const GpuRuntime& runtime, std::string& why) {
  if (!python_usable()) {
    why = "no usable Python interpreter in this process";
    return false;
  }
  try {
    py::gil_scoped_acquire gil;
    try {
      if (runtime.addresses_are_host()) {
        if (py::module_::import("hipep.tools.host_driver").attr("installed")().cast<bool>()) return true;
        why = "HIPEP_EMULATE_GPU_MEMORY=addresses is for hipep's host stand-in driver, which is not installed "
              "(hipep.tools.host_driver.install() before ONNX Runtime loads the plugin)";
        return false;
      }
      py::tuple status = py::module_::import("hipep.runtime.cuda").attr("cuda_status")(0);
      if (status[0].cast<bool>()) return true;
      why = "the NVIDIA driver loads, but hipep's CUDA device cannot run: " + utf8(status[1]);
    } catch (py::error_already_set& e) {
      why = std::string("the NVIDIA driver loads, but hipep.runtime.cuda does not import: ") + e.what();
    }
  } catch (const std::exception& e) {
    why = e.what();
  }
  return false;
}

}  // namespace hipep

extern "C" {

#if defined(_WIN32)
#define HIPEP_EXPORT __declspec(dllexport)
#else
#define HIPEP_EXPORT __attribute__((visibility("default")))
#endif

HIPEP_EXPORT OrtStatus* CreateEpFactories(const char* /*registration_name*/, const OrtApiBase* ort_api_base,
                                          const OrtLogger* /*default_logger*/, OrtEpFactory** factories,
                                          size_t max_factories, size_t* num_factories) {
  using namespace hipep;
  *num_factories = 0;
  const OrtApi* api = ort_api_base->GetApi(kOrtApiVersion);
  if (api == nullptr) return nullptr;  // cannot even build a status; ORT logs the failed GetApi
  g_ort = api;
  g_ep_api = api->GetEpApi();
  if (max_factories < 2) return make_status(ORT_INVALID_ARGUMENT, "hipep: no room for its two EP factories");
  if (gpu_runtime() == nullptr) {
    std::string why;
    std::unique_ptr<GpuRuntime> runtime = load_gpu_runtime(why);
    if (runtime && !runtime->device_memory_is_host()) {
      // GPU memory only where hipep's GPU device can run: an EP whose tensors live on a GPU it
      // cannot compute on would fail every session instead of taking the CPU reference device.
      if (!gpu_device_usable(*runtime, why)) runtime.reset();
    }
    set_gpu_runtime(std::move(runtime), why);
  }
  factories[0] = new HipEpFactory(kEpName, gpu_runtime() != nullptr);
  factories[1] = new HipEpFactory(kCpuEpName, false);
  *num_factories = 2;
  return nullptr;
}

HIPEP_EXPORT OrtStatus* ReleaseEpFactory(OrtEpFactory* factory) {
  delete static_cast<hipep::HipEpFactory*>(factory);
  return nullptr;
}

}  // extern "C"
