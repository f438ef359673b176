// Builds the plain-Python description of an OrtGraph that hipep.graph.GraphView.from_native reads.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <vector>

#include "ort_api.h"

namespace hipep {

// Returns a dict with the graph's nodes (in ORT's order), inputs, outputs, value types, small
// constant initializers (copied) and the names of large ones ("weights"). With `copy_weights`
// (Compile: the OrtGraph and its initializers die after the call) the large ones of this graph
// and of its nodes' Loop/If bodies are copied too, into each level's "weight_data" (name -> numpy array; element types numpy lacks are
// left out). `nodes_out`, when given, receives the OrtNode pointers in the same order as the
// dict's "nodes". Needs the GIL.
// `copy_outer`: with copy_weights, also the constant initializers of enclosing graphs that this
// graph's nodes read (a fused graph inside a Loop/If body); a body described inside such a graph
// leaves them to it.
pybind11::dict describe_graph(const OrtGraph* graph, std::vector<const OrtNode*>* nodes_out,
                             bool copy_weights = false, bool copy_outer = true);

// For a nested graph (a Loop/If body): {"node": the enclosing node, "types": its values' types};
// None for a top-level graph. Needs the GIL.
pybind11::object describe_parent(const OrtGraph* graph);

// Names of a node's inputs or outputs ("" for an omitted optional value).
std::vector<std::string> value_names(const OrtNode* node, bool outputs);

// numpy dtype for an ONNX element type; throws for types numpy lacks.
pybind11::dtype numpy_dtype(ONNXTensorElementDataType type);

// Element type and extents of a tensor OrtValue.
struct TensorLayout {
  ONNXTensorElementDataType elem = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  std::vector<pybind11::ssize_t> shape;
};
TensorLayout tensor_layout(const OrtValue* value);

// Copies a tensor OrtValue into a new numpy array.
pybind11::array copy_to_numpy(const OrtValue* value);

// The same, or None when numpy has no such element type (strings, 4-bit and 8-bit floats).
pybind11::object copy_to_numpy_if_possible(const OrtValue* value);

}  // namespace hipep
