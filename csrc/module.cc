// The pybind11 side of hipep/_native: the same shared library is ORT's plugin (see plugin.cc).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "ort_api.h"

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
          out[i] = a.is_none() ? py::int_(0) : py::int_(reinterpret_cast<uintptr_t>(
                                                     py::reinterpret_borrow<py::array>(a).data()));
        }
        return out;
      },
        "The data pointers of numpy arrays (0 for None).");
}
