// The ORT plugin-EP ABI: factory, OrtEp and OrtNodeComputeInfo. Decisions are made in Python
// (hipep.bridge): this file converts between ORT's C objects and Python, takes the GIL for every
// call into Python, and turns every Python exception into an OrtStatus carrying its message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "device_memory.h"
#include "gpu_runtime.h"
#include "graph_view.h"
#include "native_replay.h"
#include "ort_api.h"
#include "plugin.h"

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

bool python_usable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

namespace {

// ---- Python plumbing -------------------------------------------------------------------------

// A Python string as UTF-8, whatever it holds (a lone surrogate from a name that is not valid
// UTF-8 becomes a \x escape instead of failing the call).
std::string utf8(const py::handle& text) {
  return py::str(text).attr("encode")("utf-8", "backslashreplace").cast<std::string>();
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
          detail = utf8(e.type().attr("__name__")) + ": " + utf8(e.value());
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

// The base object of the arrays Compute makes over ORT's memory: numpy then neither copies nor
// frees that memory. One for the process (made once, under the GIL; never freed), so a run
// allocates no capsule; the arrays are valid only during their Compute call either way.
py::handle borrowed_memory_base() {
  static py::capsule* base = new py::capsule(static_cast<void*>(&g_ort), [](void*) {});
  return *base;
}

// Python hands back log records as (severity, message) with ORT's severity numbers.
void log_records(const OrtLogger* logger, const py::handle& records) {
  for (auto rec : records) {
    auto t = rec.cast<py::tuple>();
    log(logger, static_cast<OrtLoggingLevel>(t[0].cast<int>()), utf8(t[1]));
  }
}

// ---- device memory -----------------------------------------------------------------------------

// Whether a tensor lives in GPU memory the host cannot read (with the emulation, "GPU" memory is
// host memory, handed to Python as arrays like any other).
bool in_device_memory(const OrtValue* value) {
  GpuRuntime* rt = gpu_runtime();
  if (rt == nullptr || rt->device_memory_is_host()) return false;
  const OrtMemoryDevice* md = g_ep_api->Value_GetMemoryDevice(value);
  return md != nullptr && g_ep_api->MemoryDevice_GetDeviceType(md) == OrtMemoryInfoDeviceType_GPU &&
         g_ep_api->MemoryDevice_GetMemoryType(md) == OrtDeviceMemoryType_DEFAULT;
}

int device_ordinal(const OrtValue* value) {
  return static_cast<int>(g_ep_api->MemoryDevice_GetDeviceId(g_ep_api->Value_GetMemoryDevice(value)));
}

// What Python receives for a tensor in device memory: (address, shape, dtype). hipep.bridge
// turns it into the device's array at that address (no copy).
template <typename Dim>
py::tuple device_tensor(const void* data, const py::dtype& dtype, const std::vector<Dim>& shape) {
  py::tuple dims(shape.size());
  for (size_t i = 0; i < shape.size(); ++i)
    PyTuple_SET_ITEM(dims.ptr(), static_cast<py::ssize_t>(i), PyLong_FromLongLong(static_cast<long long>(shape[i])));
  return py::make_tuple(py::int_(reinterpret_cast<uintptr_t>(data)), dims, dtype);
}

// The last device_tensor tuple handed to Python per input or output position of a compiled node.
// With IOBinding ORT hands over the same tensors run after run (a decoder's KV caches, its
// logits), and the same tuple object lets hipep.bridge find its wrapper by identity, where a new
// tuple per tensor and run costs a decode step tens of microseconds. Only touched with the GIL
// held (Compute's and allocate_outputs' work), which serializes concurrent runs' use of it.
class DeviceTensorCache {
 public:
  ~DeviceTensorCache() {
    if (!python_usable()) return;  // the interpreter is gone: leak on purpose
    py::gil_scoped_acquire gil;
    for (auto* v : {&inputs_, &outputs_})
      for (Entry& e : *v) Py_XDECREF(e.tuple);
  }

  template <typename Dim>
  py::object input(size_t i, const void* data, ONNXTensorElementDataType elem, const std::vector<Dim>& shape) {
    return get(inputs_, i, data, elem, shape);
  }
  template <typename Dim>
  py::object output(size_t i, const void* data, ONNXTensorElementDataType elem, const std::vector<Dim>& shape) {
    return get(outputs_, i, data, elem, shape);
  }

 private:
  struct Entry {
    const void* data = nullptr;
    ONNXTensorElementDataType elem = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    std::vector<int64_t> shape;
    PyObject* tuple = nullptr;  // owned
  };

  template <typename Dim>
  py::object get(std::vector<Entry>& entries, size_t i, const void* data, ONNXTensorElementDataType elem,
                 const std::vector<Dim>& shape) {
    if (entries.size() <= i) entries.resize(i + 1);
    Entry& e = entries[i];
    bool same = e.tuple != nullptr && e.data == data && e.elem == elem && e.shape.size() == shape.size();
    for (size_t k = 0; same && k < shape.size(); ++k) same = e.shape[k] == static_cast<int64_t>(shape[k]);
    if (same) return py::reinterpret_borrow<py::object>(e.tuple);
    py::tuple made = device_tensor(data, numpy_dtype(elem), shape);
    Py_XDECREF(e.tuple);
    e.tuple = made.inc_ref().ptr();
    e.data = data;
    e.elem = elem;
    e.shape.assign(shape.begin(), shape.end());
    return std::move(made);
  }

  std::vector<Entry> inputs_, outputs_;
};

// ---- outputs ---------------------------------------------------------------------------------

// What one Compute call shares with the allocate_outputs callable it hands Python (an
// OutputAllocator: one small object per run, not a new function). Python may keep the callable
// past the call; once the call has returned its kernel context is gone, so the callable then
// refuses to run.
struct OutputBinding {
  OrtKernelContext* context = nullptr;
  std::string name;
  std::vector<ONNXTensorElementDataType> types;
  bool active = true;
  bool allocated = false;
  std::vector<void*> data;                  // per output, ORT's buffer (after allocation)
  std::vector<bool> on_device;              // per output, whether that buffer is device memory
  int ordinal = 0;                          // the GPU of the device buffers
  std::vector<std::vector<int64_t>> shapes;  // per output, the shape it was obtained with
  DeviceTensorCache* device_tensors = nullptr;  // the node's, alive while `active`
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
  py::handle no_owner = borrowed_memory_base();
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
    b.on_device[i] = in_device_memory(value);
    if (b.on_device[i]) {
      b.ordinal = device_ordinal(value);
      out.append(b.device_tensors->output(i, data, b.types[i], dims[i]));
      continue;
    }
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
  std::string running;  // "running <name>", what an error of this node's Compute says it was doing
  std::vector<ONNXTensorElementDataType> output_types;
  DeviceTensorCache device_tensors;
  // The record of runs Compute replays without Python (hipep/runtime/native_replay.py fills it).
  std::shared_ptr<ReplaySlot> replay_slot = std::make_shared<ReplaySlot>();

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
    OrtStatus* status = nullptr;
    if (try_native_replay(*self->replay_slot, context, self->running, &status)) return status;
    return guarded(self->running.c_str(), [&] { self->run(context); });
  }

  // compiled.run(inputs, allocate_outputs). The method is looked up on the object at every call
  // (a type-cache hit with an interned name, and no bound method is made), not kept from Compile:
  // code that replaces CompiledSubgraph.run on the class after sessions exist (the overhead
  // benchmark's timers, tests that watch Compute) still reaches every session.
  py::object call_run(const py::tuple& inputs, const py::object& allocate) {
    static PyObject* run_name = PyUnicode_InternFromString("run");  // never freed
    PyObject* args[] = {compiled->get().ptr(), inputs.ptr(), allocate.ptr()};
    PyObject* result = PyObject_VectorcallMethod(run_name, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
    if (result == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(result);
  }

  void run(OrtKernelContext* context) {
    size_t num_inputs = 0, num_outputs = 0;
    HIPEP_ORT(g_ort->KernelContext_GetInputCount(context, &num_inputs));
    HIPEP_ORT(g_ort->KernelContext_GetOutputCount(context, &num_outputs));
    // Inputs are wrapped without copying, read-only, valid only during this call; a tuple, which
    // Python reads but never resizes.
    py::handle no_owner = borrowed_memory_base();
    py::tuple inputs(num_inputs);
    for (size_t i = 0; i < num_inputs; ++i) {
      const OrtValue* value = nullptr;
      HIPEP_ORT(g_ort->KernelContext_GetInput(context, i, &value));
      py::object item;
      if (value == nullptr) {
        item = py::none();
      } else {
        TensorLayout layout = tensor_layout(value);
        const void* data = nullptr;
        HIPEP_ORT(g_ort->GetTensorData(value, &data));
        if (in_device_memory(value)) {
          item = device_tensors.input(i, data, layout.elem, layout.shape);
        } else {
          py::array arr(numpy_dtype(layout.elem), layout.shape, {}, data, no_owner);
          py::detail::array_proxy(arr.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
          item = std::move(arr);
        }
      }
      PyTuple_SET_ITEM(inputs.ptr(), static_cast<py::ssize_t>(i), item.release().ptr());
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
    binding->on_device.assign(num_outputs, false);
    binding->shapes.assign(num_outputs, {});
    binding->device_tensors = &device_tensors;
    py::object allocate = py::cast(binding);  // an OutputAllocator sharing the binding
    // The GIL stays held through compiled.run: the CPU device never waits, and the CUDA device
    // waits for its stream at the end of a run (CudaStream.sync, hipep/runtime/cuda_stream.py) in
    // cuStreamSynchronize through cuda-bindings, whose Python functions release the GIL around
    // every driver call (cuda-bindings >= 12.9, NVIDIA/cuda-python#914), so other threads run
    // meanwhile. The copies C++ makes below release it themselves (copy_or_throw).
    py::object results;
    {
      struct Deactivate {
        OutputBinding& b;
        ~Deactivate() { b.active = false; }
      } deactivate{*binding};
      results = call_run(inputs, allocate);
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
      if (binding->allocated && binding->on_device[i]) {
        store_device_output(*binding, i, outputs[i]);
        continue;
      }
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
        if (in_device_memory(out)) {  // a host array for a device output: uploaded
          copy_or_throw(device_ordinal(out), dst, arr.data(), arr.nbytes(), CopyKind::HostToDevice, i);
          continue;
        }
      }
      // memmove: an array returned as a view into ORT's own output buffer may overlap it.
      if (arr.nbytes()) std::memmove(dst, arr.data(), arr.nbytes());
    }
  }

  // A synchronous copy waits for the GPU: without the GIL, so other Python threads (other
  // sessions' runs included) go on meanwhile. `src` stays alive: the caller holds its array.
  void copy_or_throw(int ordinal, void* dst, const void* src, size_t nbytes, CopyKind kind, size_t i) {
    std::string error;
    {
      py::gil_scoped_release no_gil;
      error = gpu_runtime()->copy(ordinal, dst, src, nbytes, kind);
    }
    if (!error.empty()) throw std::runtime_error(name + ": output " + std::to_string(i) + ": " + error);
  }

  // An output ORT keeps in device memory: the device's arrays are written in place (the common
  // case); one computed elsewhere on the device is copied in, a host array uploaded.
  void store_device_output(OutputBinding& b, size_t i, const py::handle& result) {
    const std::vector<int64_t>& shape = b.shapes[i];
    size_t nbytes = numpy_dtype(b.types[i]).itemsize();
    for (int64_t d : shape) nbytes *= static_cast<size_t>(d);
    if (py::isinstance<py::array>(result)) {
      auto arr = py::array::ensure(result, py::array::c_style);
      if (static_cast<size_t>(arr.nbytes()) != nbytes)
        throw std::runtime_error(name + ": output " + std::to_string(i) + " came out with " +
                                 std::to_string(arr.nbytes()) + " bytes, ORT's buffer has " + std::to_string(nbytes));
      copy_or_throw(b.ordinal, b.data[i], arr.data(), nbytes, CopyKind::HostToDevice, i);
      return;
    }
    if (!py::hasattr(result, "ptr") || !py::hasattr(result, "nbytes"))
      throw std::runtime_error(name + ": output " + std::to_string(i) + " is neither an array nor device memory");
    auto ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(result.attr("ptr").cast<uint64_t>()));
    if (ptr == b.data[i]) return;  // written in place
    if (result.attr("nbytes").cast<size_t>() != nbytes)
      throw std::runtime_error(name + ": output " + std::to_string(i) + " came out with " +
                               std::to_string(result.attr("nbytes").cast<size_t>()) + " bytes, ORT's buffer has " +
                               std::to_string(nbytes));
    copy_or_throw(b.ordinal, b.data[i], ptr, nbytes, CopyKind::DeviceToDevice, i);
  }
};

// ---- the EP ----------------------------------------------------------------------------------

struct HipEp : OrtEp {
  const OrtLogger* logger;
  std::unique_ptr<PyRef> state;  // hipep.bridge.EpState
  // Set when GetCapability found nodes that the 'strict' option forbids leaving to another EP
  // (EpState.strict_failure). Only then does a run's start need Python, to raise that failure:
  // every other run starts without taking the GIL.
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
      if (!self->state->get().attr("strict_failure").is_none())
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
        auto info = std::make_unique<ComputeInfo>();
        info->name = fused_name ? fused_name : "hipep subgraph";
        info->running = "running " + info->name;
        // The OrtGraph (and every initializer value it hands out) dies with this call: the
        // weights are copied here, into arrays Python owns.
        py::dict desc = describe_graph(graphs[i], nullptr, /*copy_weights=*/true);
        std::vector<std::string> in_names = value_names(fused_nodes[i], false);
        std::vector<std::string> out_names = value_names(fused_nodes[i], true);
        py::tuple result = self->state->get().attr("compile")(desc, info->name, in_names, out_names);
        info->compiled.reset(new PyRef(result[0]));
        result[0].attr("native_slot") = py::cast(info->replay_slot);
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

void register_compute_types(py::module_& m) {
  py::class_<OutputBinding, std::shared_ptr<OutputBinding>>(
      m, "OutputAllocator",
      "allocate_outputs(shapes) of one Compute call: obtains every output from ONNX Runtime with its "
      "shape, once per run, and returns arrays over ONNX Runtime's memory (device outputs as "
      "(address, shape, dtype)); refuses once its run has ended.")
      .def("__call__", [](OutputBinding& b, const py::sequence& shapes) { return allocate_outputs(b, shapes); },
           py::arg("shapes"));
}

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
