// Compute: one fused node's run. ORT's input tensors go to Python (hipep.bridge.CompiledSubgraph.run)
// as read-only arrays over ORT's memory, or as (address, shape, dtype) for device memory; Python
// obtains the outputs through allocate_outputs and writes them in place. A record of earlier runs
// (native_replay.cc) may run it without Python first.
#include "compute.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "device_memory.h"
#include "gpu_runtime.h"
#include "graph_view.h"
#include "native_replay.h"
#include "python_glue.h"

namespace hipep {

namespace {

// The base object of the arrays Compute makes over ORT's memory: numpy then neither copies nor
// frees that memory. One for the process (made once, under the GIL; never freed), so a run
// allocates no capsule; the arrays are valid only during their Compute call either way.
py::handle borrowed_memory_base() {
  static py::capsule* base = new py::capsule(static_cast<void*>(&g_ort), [](void*) {});
  return *base;
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

}  // namespace

OrtNodeComputeInfo* new_compute_info(const std::string& name, py::object compiled,
                                     std::vector<ONNXTensorElementDataType> output_types) {
  auto info = std::make_unique<ComputeInfo>();
  info->name = name;
  info->running = "running " + name;
  compiled.attr("native_slot") = py::cast(info->replay_slot);
  info->compiled.reset(new PyRef(std::move(compiled)));
  info->output_types = std::move(output_types);
  return info.release();
}

void delete_compute_info(OrtNodeComputeInfo* info) { delete static_cast<ComputeInfo*>(info); }

void register_compute_types(py::module_& m) {
  py::class_<OutputBinding, std::shared_ptr<OutputBinding>>(
      m, "OutputAllocator",
      "allocate_outputs(shapes) of one Compute call: obtains every output from ONNX Runtime with its "
      "shape, once per run, and returns arrays over ONNX Runtime's memory (device outputs as "
      "(address, shape, dtype)); refuses once its run has ended.")
      .def("__call__", [](OutputBinding& b, const py::sequence& shapes) { return allocate_outputs(b, shapes); },
           py::arg("shapes"));
}

}  // namespace hipep
