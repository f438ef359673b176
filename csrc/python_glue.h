// Python plumbing shared by the plugin's ORT entry points (plugin.cc) and Compute (compute.cc):
// every call into Python takes the GIL, and every exception becomes an OrtStatus with its message.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "ort_api.h"
#include "plugin.h"

namespace hipep {

namespace py = pybind11;

// An ORT call's failure (HIPEP_ORT), carrying ORT's error code through C++ to the OrtStatus.
struct OrtError : std::runtime_error {
  OrtErrorCode code;
  OrtError(OrtErrorCode c, const std::string& m) : std::runtime_error(m), code(c) {}
};

// A Python string as UTF-8, whatever it holds (a lone surrogate from a name that is not valid
// UTF-8 becomes a \x escape instead of failing the call).
inline std::string utf8(const py::handle& text) {
  return py::str(text).attr("encode")("utf-8", "backslashreplace").cast<std::string>();
}

// Runs `fn` with the GIL held and converts any exception into an OrtStatus.
template <typename Fn>
inline OrtStatus* guarded(const char* what, Fn&& fn) noexcept {
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

}  // namespace hipep
