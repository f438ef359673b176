// Compute for the nodes hipep fused (compute.cc): the OrtNodeComputeInfo Compile hands ORT.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "ort_api.h"

namespace hipep {

// The compute info of fused node `name`, running `compiled` (a hipep.bridge.CompiledSubgraph,
// whose `native_slot` this sets) with outputs of `output_types`.
OrtNodeComputeInfo* new_compute_info(const std::string& name, pybind11::object compiled,
                                     std::vector<ONNXTensorElementDataType> output_types);
// Frees one made by new_compute_info (nullptr is allowed).
void delete_compute_info(OrtNodeComputeInfo* info);

// Registers OutputAllocator, the type of the allocate_outputs callable Compute hands Python.
void register_compute_types(pybind11::module_& m);

}  // namespace hipep
