// What plugin.cc offers the rest of the native library.
#pragma once

#include <pybind11/pybind11.h>

namespace hipep {

// Whether this process has a Python interpreter that is up and not finalizing (ORT may release
// sessions, and with them Python objects, during process exit).
bool python_usable();

}  // namespace hipep
