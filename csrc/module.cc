// The pybind11 side of hipep/_native: the same shared library is ORT's plugin (see plugin.cc).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "compute.h"
#include "device_memory.h"
#include "gpu_runtime.h"
#include "native_replay.h"
#include "ort_api.h"
#include "plugin.h"

namespace py = pybind11;

PYBIND11_MODULE(_native, m) {
  m.doc() = "hipep's native library: the ONNX Runtime plugin EP and its Python module";
  m.attr("ort_api_version") = hipep::kOrtApiVersion;
  m.attr("ep_name") = hipep::kEpName;
  m.def("plugin_loaded", [] { return hipep::g_ort != nullptr; },
        "True once ONNX Runtime has loaded this library as a plugin EP in this process.");
  // numpy exposes a data pointer only through __array_interface__ or .ctypes (a dict or an
  // object per call, ~1.7 us each); the runtime compares ORT's buffers every run.
  m.def("data_pointers", [](const py::sequence& arrays) {
        py::list out(arrays.size());
        for (size_t i = 0; i < arrays.size(); ++i) {
          py::handle a = arrays[i];
          if (a.is_none())
            out[i] = py::int_(0);
          else if (py::isinstance<py::array>(a))
            out[i] = py::int_(reinterpret_cast<uintptr_t>(py::reinterpret_borrow<py::array>(a).data()));
          else  // a device array: its address
            out[i] = a.attr("ptr");
        }
        return out;
      },
        "The data pointers of numpy arrays and device arrays (0 for None).");
  m.attr("cpu_ep_name") = hipep::kCpuEpName;
  hipep::register_compute_types(m);
  hipep::register_native_replay(m);
  m.def("gpu_memory", [] {
        py::dict out;
        hipep::GpuRuntime* rt = hipep::gpu_runtime();
        out["runtime"] = rt ? py::object(py::str(rt->name())) : py::object(py::none());
        out["devices"] = rt ? rt->device_count() : 0;
        out["vendor_id"] = rt ? rt->vendor_id() : 0;
        out["why_not"] = hipep::gpu_runtime_absent_reason();
        return out;
      },
        "Whether HipExecutionProvider offers GPU memory in this process: the GPU runtime the plugin "
        "loaded ('cuda', 'emulated', 'emulated-addresses' or None), its GPU count and PCI vendor id, and why there is none.");
  m.def("memory_stats", [] {
        auto& c = hipep::memory_counters();
        py::dict out;
        out["device_in_use"] = c.device_in_use.load();
        out["device_cached"] = c.device_cached.load();
        out["device_reserved"] = c.device_reserved.load();
        out["host_in_use"] = c.host_in_use.load();
        out["allocators"] = c.allocators.load();
        out["transfer_bytes"] = c.transfer_bytes.load();
        out["transfers"] = c.transfer_calls.load();
        return out;
      },
        "hipep's GPU memory as ORT uses it: bytes ORT holds from hipep's allocators (device, pinned "
        "host), freed blocks cached for reuse, bytes held from the driver, live allocators, and the "
        "bytes and tensors copied by hipep's data transfer.");
}
