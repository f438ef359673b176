// What the ORT plugin (plugin.cc) adds to hipep's Python module (module.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace hipep {

// Registers OutputAllocator, the type of the allocate_outputs callable Compute hands Python.
void register_compute_types(pybind11::module_& m);

// Whether this process has a Python interpreter that is up and not finalizing (ORT may release
// sessions, and with them Python objects, during process exit).
bool python_usable();

}  // namespace hipep
