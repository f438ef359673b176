// The ORT plugin-EP ABI: factory, OrtEp and OrtNodeComputeInfo. Decisions are made in Python
// (hipep.bridge): this file converts between ORT's C objects and Python, takes the GIL for every
// call into Python, and turns every Python exception into an OrtStatus carrying its message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "graph_view.h"
#include "ort_api.h"

namespace py = pybind11;

namespace hipep {

const OrtApi* g_ort = nullptr;
const OrtEpApi* g_ep_api = nullptr;

namespace {

struct OrtError : std::runtime_error {
  OrtErrorCode code;
  OrtError(OrtErrorCode c, const std::string& m) : std::runtime_error(m), code(c) {}
};

}  // namespace

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

namespace {

// ---- Python plumbing -------------------------------------------------------------------------

bool python_usable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// Runs `fn` with the GIL held and converts any exception into an OrtStatus.
template <typename Fn>
OrtStatus* guarded(const char* what, Fn&& fn) noexcept {
  if (!python_usable())
    return make_status(ORT_FAIL, std::string("hipep: ") + what +
                                     ": no usable Python interpreter in this process (hipep runs its compiler in Python)");
  try {
    py::gil_scoped_acquire gil;
    try {
      fn();
      return nullptr;
    } catch (py::error_already_set& e) {
      // Options errors are the caller's fault: report them as INVALID_ARGUMENT.
      bool invalid = e.matches(PyExc_ValueError) || e.matches(PyExc_TypeError);
      // hipep's own errors carry a complete message; anything else is a bug, so keep its traceback.
      std::string detail = e.what();
      try {
        if (e.matches(py::module_::import("hipep.errors").attr("HipepError")))
          detail = py::str(e.type().attr("__name__")).cast<std::string>() + ": " +
                   py::str(e.value()).cast<std::string>();
      } catch (py::error_already_set&) {
      }
      std::string message = std::string("hipep: ") + what + " failed: " + detail;
      return make_status(invalid ? ORT_INVALID_ARGUMENT : ORT_FAIL, message);
    }
  } catch (const OrtError& e) {
    return make_status(e.code, std::string("hipep: ") + what + " failed: " + e.what());
  } catch (const std::exception& e) {
    return make_status(ORT_FAIL, std::string("hipep: ") + what + " failed: " + e.what());
  } catch (...) {
    return make_status(ORT_FAIL, std::string("hipep: ") + what + " failed with an unknown C++ exception");
  }
}

// Holds a Python object and drops it safely: with the GIL, and never after the interpreter is
// gone (ORT may release sessions during process exit, after Python finalized).
class PyRef {
 public:
  explicit PyRef(py::object obj) : obj_(new py::object(std::move(obj))) {}
  ~PyRef() {
    if (!obj_) return;
    if (python_usable()) {
      py::gil_scoped_acquire gil;
      delete obj_;
    }  // else: leak on purpose, the interpreter is gone
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  py::object& get() { return *obj_; }

 private:
  py::object* obj_;
};

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
    log(logger, static_cast<OrtLoggingLevel>(t[0].cast<int>()), t[1].cast<std::string>());
  }
}

// ---- outputs ---------------------------------------------------------------------------------

// What one Compute call shares with the allocate_outputs callable it hands Python. Python may keep
// the callable past the call; once the call has returned its kernel context is gone, so the
// callable then refuses to run.
struct OutputBinding {
  OrtKernelContext* context = nullptr;
  std::string name;
  std::vector<ONNXTensorElementDataType> types;
  bool active = true;
  bool allocated = false;
  std::vector<void*> data;                  // per output, ORT's buffer (after allocation)
  std::vector<std::vector<int64_t>> shapes;  // per output, the shape it was obtained with
};

// allocate_outputs(shapes: list[tuple[int, ...]]) -> list[np.ndarray]: obtains every output from
// ORT with its shape, once per run, and returns writable arrays over ORT's memory (no copy, valid
// during this Compute call only), so the plan can write its results in place.
py::list allocate_outputs(OutputBinding& b, const py::sequence& shapes) {
  if (!b.active) throw std::runtime_error(b.name + ": allocate_outputs was called after its run ended");
  if (b.allocated) throw std::runtime_error(b.name + ": allocate_outputs was called twice in one run");
  if (shapes.size() != b.types.size())
    throw std::runtime_error(b.name + ": allocate_outputs got " + std::to_string(shapes.size()) +
                             " shapes, the node has " + std::to_string(b.types.size()) + " outputs");
  // Every shape is checked before the first output is obtained: a bad one leaves none half-made.
  std::vector<std::vector<int64_t>> dims(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    py::object s = shapes[i];
    if (!py::isinstance<py::sequence>(s) || py::isinstance<py::str>(s))
      throw std::runtime_error(b.name + ": allocate_outputs: shape " + std::to_string(i) + " is not a sequence");
    for (auto d : s.cast<py::sequence>()) {
      int64_t v = -1;
      try {
        v = py::reinterpret_borrow<py::object>(d).cast<int64_t>();
      } catch (const py::cast_error&) {
      }
      if (v < 0 || py::isinstance<py::bool_>(d))
        throw std::runtime_error(b.name + ": allocate_outputs: shape " + std::to_string(i) + " = " +
                                 py::repr(s).cast<std::string>() + " is not a list of extents >= 0");
      dims[i].push_back(v);
    }
  }
  b.allocated = true;
  py::capsule no_owner(static_cast<void*>(b.context), [](void*) {});
  py::list out;
  for (size_t i = 0; i < dims.size(); ++i) {
    py::dtype dtype = numpy_dtype(b.types[i]);
    OrtValue* value = nullptr;
    HIPEP_ORT(g_ort->KernelContext_GetOutput(b.context, i, dims[i].data(), dims[i].size(), &value));
    void* data = nullptr;
    HIPEP_ORT(g_ort->GetTensorMutableData(value, &data));
    b.data[i] = data;
    b.shapes[i] = dims[i];
    std::vector<py::ssize_t> shape(dims[i].begin(), dims[i].end());
    // An empty output may have no buffer: numpy then makes its own (there is nothing to write).
    out.append(data ? py::array(dtype, shape, {}, data, no_owner) : py::array(dtype, shape));
  }
  return out;
}

std::string shape_text(const int64_t* dims, size_t rank) {
  std::string s = "[";
  for (size_t i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// ---- compute info ----------------------------------------------------------------------------

struct ComputeInfo : OrtNodeComputeInfo {
  std::unique_ptr<PyRef> compiled;  // hipep.bridge.CompiledSubgraph
  std::string name;
  std::vector<ONNXTensorElementDataType> output_types;

  ComputeInfo() {
    ort_version_supported = kOrtApiVersion;
    CreateState = CreateStateImpl;
    Compute = ComputeImpl;
    ReleaseState = ReleaseStateImpl;
  }

  static OrtStatus* ORT_API_CALL CreateStateImpl(OrtNodeComputeInfo* self, OrtNodeComputeContext*,
                                                 void** state) noexcept {
    *state = self;  // the compiled object is stateless per run: runs may be concurrent
    return nullptr;
  }
  static void ORT_API_CALL ReleaseStateImpl(OrtNodeComputeInfo*, void*) noexcept {}

  static OrtStatus* ORT_API_CALL ComputeImpl(OrtNodeComputeInfo* self_base, void*,
                                             OrtKernelContext* context) noexcept {
    auto* self = static_cast<ComputeInfo*>(self_base);
    return guarded(("running " + self->name).c_str(), [&] { self->run(context); });
  }

  void run(OrtKernelContext* context) {
    size_t num_inputs = 0, num_outputs = 0;
    HIPEP_ORT(g_ort->KernelContext_GetInputCount(context, &num_inputs));
    HIPEP_ORT(g_ort->KernelContext_GetOutputCount(context, &num_outputs));
    // Inputs are wrapped without copying, read-only, valid only during this call.
    py::capsule no_owner(static_cast<void*>(context), [](void*) {});
    py::list inputs;
    for (size_t i = 0; i < num_inputs; ++i) {
      const OrtValue* value = nullptr;
      HIPEP_ORT(g_ort->KernelContext_GetInput(context, i, &value));
      if (value == nullptr) {
        inputs.append(py::none());
        continue;
      }
      TensorLayout layout = tensor_layout(value);
      const void* data = nullptr;
      HIPEP_ORT(g_ort->GetTensorData(value, &data));
      py::array arr(numpy_dtype(layout.elem), layout.shape, {}, data, no_owner);
      py::detail::array_proxy(arr.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
      inputs.append(arr);
    }
    // Python obtains ORT's outputs through allocate_outputs as soon as it knows their shapes and
    // writes them in place; it returns the output arrays either way. An output it returns in
    // some other memory (computed the old way, or allocate_outputs never called) is copied.
    if (num_outputs != output_types.size())
      throw std::runtime_error(name + " has " + std::to_string(num_outputs) + " outputs in ORT, " +
                               std::to_string(output_types.size()) + " when compiled");
    auto binding = std::make_shared<OutputBinding>();
    binding->context = context;
    binding->name = name;
    binding->types = output_types;
    binding->data.assign(num_outputs, nullptr);
    binding->shapes.assign(num_outputs, {});
    py::cpp_function allocate([binding](py::sequence shapes) { return allocate_outputs(*binding, shapes); },
                              py::arg("shapes"));
    py::object results;
    {
      struct Deactivate {
        OutputBinding& b;
        ~Deactivate() { b.active = false; }
      } deactivate{*binding};
      results = compiled->get().attr("run")(inputs, allocate);
    }
    if (results.is_none()) {
      if (!binding->allocated)
        throw std::runtime_error(name + " returned no outputs and did not call allocate_outputs");
      return;
    }
    auto outputs = results.cast<py::list>();
    if (outputs.size() != num_outputs)
      throw std::runtime_error(name + " produced " + std::to_string(outputs.size()) + " outputs, ORT expects " +
                               std::to_string(num_outputs));
    for (size_t i = 0; i < num_outputs; ++i) {
      py::dtype want = numpy_dtype(output_types[i]);
      auto arr = py::array::ensure(outputs[i], py::array::c_style);
      if (!arr) throw std::runtime_error(name + ": output " + std::to_string(i) + " is not an array");
      if (!arr.dtype().is(want) && !arr.dtype().equal(want))
        throw std::runtime_error(name + ": output " + std::to_string(i) + " has dtype " +
                                 py::str(arr.dtype()).cast<std::string>() + ", expected " +
                                 py::str(want).cast<std::string>());
      std::vector<int64_t> shape(arr.shape(), arr.shape() + arr.ndim());
      void* dst = nullptr;
      if (binding->allocated) {
        const std::vector<int64_t>& got = binding->shapes[i];
        if (shape != got)
          throw std::runtime_error(name + ": output " + std::to_string(i) + " came out with shape " +
                                   shape_text(shape.data(), shape.size()) + ", but allocate_outputs was given " +
                                   shape_text(got.data(), got.size()));
        dst = binding->data[i];
        if (arr.data() == dst) continue;  // written in place
      } else {
        OrtValue* out = nullptr;
        HIPEP_ORT(g_ort->KernelContext_GetOutput(context, i, shape.data(), shape.size(), &out));
        HIPEP_ORT(g_ort->GetTensorMutableData(out, &dst));
      }
      // memmove: an array returned as a view into ORT's own output buffer may overlap it.
      if (arr.nbytes()) std::memmove(dst, arr.data(), arr.nbytes());
    }
  }
};

// ---- the EP ----------------------------------------------------------------------------------

struct HipEp : OrtEp {
  const OrtLogger* logger;
  std::unique_ptr<PyRef> state;  // hipep.bridge.EpState

  HipEp(const OrtLogger* l, py::object s) : logger(l), state(new PyRef(std::move(s))) {
    std::memset(static_cast<OrtEp*>(this), 0, sizeof(OrtEp));
    ort_version_supported = kOrtApiVersion;
    GetName = [](const OrtEp*) noexcept -> const char* { return kEpName; };
    GetCapability = GetCapabilityImpl;
    Compile = CompileImpl;
    ReleaseNodeComputeInfos = ReleaseNodeComputeInfosImpl;
    OnRunStart = OnRunStartImpl;
  }

  static OrtStatus* ORT_API_CALL OnRunStartImpl(OrtEp* self_base, const OrtRunOptions*) noexcept {
    auto* self = static_cast<HipEp*>(self_base);
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
        auto info = std::make_unique<ComputeInfo>();
        info->name = fused_name ? fused_name : "hipep subgraph";
        // The OrtGraph (and every initializer value it hands out) dies with this call: the
        // weights are copied here, into arrays Python owns.
        py::dict desc = describe_graph(graphs[i], nullptr, /*copy_weights=*/true);
        std::vector<std::string> in_names = value_names(fused_nodes[i], false);
        std::vector<std::string> out_names = value_names(fused_nodes[i], true);
        py::tuple result = self->state->get().attr("compile")(desc, info->name, in_names, out_names);
        info->compiled.reset(new PyRef(result[0]));
        for (auto t : result[1].cast<py::list>())
          info->output_types.push_back(static_cast<ONNXTensorElementDataType>(t.cast<int>()));
        log_records(self->logger, result[2]);
        infos[i] = info.release();
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
    for (size_t i = 0; i < count; ++i) delete static_cast<ComputeInfo*>(infos[i]);
  }
};

// ---- the factory -----------------------------------------------------------------------------

struct HipEpFactory : OrtEpFactory {
  HipEpFactory() {
    std::memset(static_cast<OrtEpFactory*>(this), 0, sizeof(OrtEpFactory));
    ort_version_supported = kOrtApiVersion;
    GetName = [](const OrtEpFactory*) noexcept -> const char* { return kEpName; };
    GetVendor = [](const OrtEpFactory*) noexcept -> const char* { return kVendor; };
    GetVendorId = [](const OrtEpFactory*) noexcept -> uint32_t { return 0; };
    GetVersion = [](const OrtEpFactory*) noexcept -> const char* { return kVersion; };
    GetSupportedDevices = GetSupportedDevicesImpl;
    CreateEp = CreateEpImpl;
    ReleaseEp = [](OrtEpFactory*, OrtEp* ep) noexcept { delete static_cast<HipEp*>(ep); };
    CreateDataTransfer = [](OrtEpFactory*, OrtDataTransferImpl** out) noexcept -> OrtStatus* {
      *out = nullptr;  // host memory only: ORT's own CPU copies suffice
      return nullptr;
    };
  }

  // hipep's buffers are host memory (the CPU reference device), so it offers itself for the CPU.
  static OrtStatus* ORT_API_CALL GetSupportedDevicesImpl(OrtEpFactory* self, const OrtHardwareDevice* const* devices,
                                                         size_t num_devices, OrtEpDevice** ep_devices,
                                                         size_t max_ep_devices, size_t* num_ep_devices) noexcept {
    *num_ep_devices = 0;
    for (size_t i = 0; i < num_devices && *num_ep_devices < max_ep_devices; ++i) {
      if (g_ort->HardwareDevice_Type(devices[i]) != OrtHardwareDeviceType_CPU) continue;
      OrtEpDevice* dev = nullptr;
      OrtStatus* st = g_ep_api->CreateEpDevice(self, devices[i], nullptr, nullptr, &dev);
      if (st) return st;
      ep_devices[(*num_ep_devices)++] = dev;
      break;
    }
    return nullptr;
  }

  static OrtStatus* ORT_API_CALL CreateEpImpl(OrtEpFactory*, const OrtHardwareDevice* const*,
                                              const OrtKeyValuePairs* const*, size_t,
                                              const OrtSessionOptions* session_options, const OrtLogger* logger,
                                              OrtEp** ep) noexcept {
    *ep = nullptr;
    return guarded("creating the execution provider", [&] {
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
      py::object state = bridge().attr("create_ep")(config, static_cast<int>(level));
      *ep = new HipEp(logger, state);
    });
  }
};

}  // namespace
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
  if (max_factories < 1) return make_status(ORT_INVALID_ARGUMENT, "hipep: no room for its EP factory");
  factories[0] = new HipEpFactory();
  *num_factories = 1;
  return nullptr;
}

HIPEP_EXPORT OrtStatus* ReleaseEpFactory(OrtEpFactory* factory) {
  delete static_cast<hipep::HipEpFactory*>(factory);
  return nullptr;
}

}  // extern "C"
