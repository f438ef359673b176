// The pybind11 side of hipep/_native: the same shared library is ORT's plugin (see plugin.cc).
#include <pybind11/pybind11.h>

#include "ort_api.h"

PYBIND11_MODULE(_native, m) {
  m.doc() = "hipep's native library: the ONNX Runtime plugin EP and its Python module";
  m.attr("ort_api_version") = hipep::kOrtApiVersion;
  m.attr("ep_name") = hipep::kEpName;
  m.def("plugin_loaded", [] { return hipep::g_ort != nullptr; },
        "True once ONNX Runtime has loaded this library as a plugin EP in this process.");
}
