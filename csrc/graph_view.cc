// OrtGraph -> plain Python objects. The OrtGraph is valid only during ORT's call, so everything
// is copied out here. Initializers above kSmallConstantElements are weights: GetCapability only
// names them; Compile copies them as well, because hipep asks ORT not to pass them to Compute
// (drop_constant_initializers) and ORT frees its own copy once the session is set up.
#include "graph_view.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>

namespace py = pybind11;

namespace hipep {

namespace {

constexpr size_t kSmallConstantElements = size_t{1} << 16;  // keep in step with hipep/graph.py

// ---- names that are not valid UTF-8 -------------------------------------------------------------
// ONNX requires UTF-8 but ORT does not check. Python's str cannot hold such bytes as they are, so:

py::str decode(const std::string& s, const char* errors) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), errors);
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

bool valid_utf8(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "strict");
  if (o == nullptr) {
    PyErr_Clear();
    return false;
  }
  Py_DECREF(o);
  return true;
}

// Text (node names, op types, attribute strings, symbolic dims): invalid bytes become \xNN escapes,
// printable in every message.
py::str text(const std::string& s) { return decode(s, "backslashreplace"); }

// A value name, which wires nodes together: invalid bytes become lone surrogates, which no valid
// name decodes to, so no two different names meet. Nodes touching such a value are not claimed
// (hipep.bridge rejects them by the node's "invalid_utf8" list), so these never reach a message.
py::str value_key(const std::string& s) { return decode(s, "surrogateescape"); }

std::string value_name(const OrtValueInfo* info) {
  if (info == nullptr) return "";
  const char* name = nullptr;
  HIPEP_ORT(g_ort->GetValueInfoName(info, &name));
  return name ? name : "";
}

// (kind, elem_type, shape) with shape None for unranked; dims are int, symbolic str or None.
py::tuple describe_type(const OrtValueInfo* info) {
  const OrtTypeInfo* type_info = nullptr;
  HIPEP_ORT(g_ort->GetValueInfoTypeInfo(info, &type_info));
  if (type_info == nullptr) return py::make_tuple("unknown", 0, py::none());
  ONNXType onnx_type = ONNX_TYPE_UNKNOWN;
  HIPEP_ORT(g_ort->GetOnnxTypeFromTypeInfo(type_info, &onnx_type));
  switch (onnx_type) {
    case ONNX_TYPE_TENSOR: break;
    case ONNX_TYPE_SEQUENCE: return py::make_tuple("sequence", 0, py::none());
    case ONNX_TYPE_MAP: return py::make_tuple("map", 0, py::none());
    case ONNX_TYPE_OPTIONAL: return py::make_tuple("optional", 0, py::none());
    case ONNX_TYPE_SPARSETENSOR: return py::make_tuple("sparse_tensor", 0, py::none());
    default: return py::make_tuple("unknown", 0, py::none());
  }
  const OrtTensorTypeAndShapeInfo* tensor_info = nullptr;
  HIPEP_ORT(g_ort->CastTypeInfoToTensorInfo(type_info, &tensor_info));
  if (tensor_info == nullptr) return py::make_tuple("tensor", 0, py::none());
  ONNXTensorElementDataType elem = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  HIPEP_ORT(g_ort->GetTensorElementType(tensor_info, &elem));
  size_t rank = 0;
  HIPEP_ORT(g_ort->GetDimensionsCount(tensor_info, &rank));
  std::vector<int64_t> dims(rank);
  std::vector<const char*> symbols(rank, nullptr);
  if (rank) {
    HIPEP_ORT(g_ort->GetDimensions(tensor_info, dims.data(), rank));
    HIPEP_ORT(g_ort->GetSymbolicDimensions(tensor_info, symbols.data(), rank));
  }
  py::list shape;
  for (size_t i = 0; i < rank; ++i) {
    if (dims[i] >= 0) shape.append(dims[i]);
    else if (symbols[i] && symbols[i][0]) shape.append(text(symbols[i]));
    else shape.append(py::none());
  }
  return py::make_tuple("tensor", static_cast<int>(elem), py::tuple(shape));
}

void add_type(py::dict& types, const OrtValueInfo* info) {
  if (info == nullptr) return;
  std::string name = value_name(info);
  if (name.empty()) return;
  py::str key = value_key(name);
  if (types.contains(key)) return;
  types[key] = describe_type(info);
}

std::vector<const OrtValueInfo*> node_values(const OrtNode* node, int which) {
  size_t n = 0;
  std::vector<const OrtValueInfo*> v;
  if (which == 0) {
    HIPEP_ORT(g_ort->Node_GetNumInputs(node, &n));
    v.resize(n);
    if (n) HIPEP_ORT(g_ort->Node_GetInputs(node, v.data(), n));
  } else if (which == 1) {
    HIPEP_ORT(g_ort->Node_GetNumOutputs(node, &n));
    v.resize(n);
    if (n) HIPEP_ORT(g_ort->Node_GetOutputs(node, v.data(), n));
  } else {
    HIPEP_ORT(g_ort->Node_GetNumImplicitInputs(node, &n));
    v.resize(n);
    if (n) HIPEP_ORT(g_ort->Node_GetImplicitInputs(node, v.data(), n));
  }
  return v;
}

py::object read_attribute(const OrtOpAttr* attr) {
  OrtOpAttrType type = ORT_OP_ATTR_UNDEFINED;
  HIPEP_ORT(g_ort->OpAttr_GetType(attr, &type));
  size_t size = 0;
  // Asks ORT how many bytes an attribute needs: ReadOpAttr fails and reports the size.
  auto byte_size = [&](OrtOpAttrType t) {
    size_t needed = 0;
    OrtStatus* st = g_ort->ReadOpAttr(attr, t, nullptr, 0, &needed);
    if (st) g_ort->ReleaseStatus(st);
    return needed;
  };
  switch (type) {
    case ORT_OP_ATTR_INT: {
      int64_t v = 0;
      HIPEP_ORT(g_ort->ReadOpAttr(attr, type, &v, sizeof(v), &size));
      return py::int_(v);
    }
    case ORT_OP_ATTR_FLOAT: {
      float v = 0;
      HIPEP_ORT(g_ort->ReadOpAttr(attr, type, &v, sizeof(v), &size));
      return py::float_(v);
    }
    case ORT_OP_ATTR_INTS: {
      size_t n = byte_size(type) / sizeof(int64_t);
      std::vector<int64_t> v(n);
      if (n) HIPEP_ORT(g_ort->ReadOpAttr(attr, type, v.data(), n * sizeof(int64_t), &size));
      return py::cast(v);
    }
    case ORT_OP_ATTR_FLOATS: {
      size_t n = byte_size(type) / sizeof(float);
      std::vector<float> v(n);
      if (n) HIPEP_ORT(g_ort->ReadOpAttr(attr, type, v.data(), n * sizeof(float), &size));
      py::list out;
      for (float f : v) out.append(py::float_(f));
      return out;
    }
    case ORT_OP_ATTR_STRING: {
      size_t n = byte_size(type);
      std::string s(n, '\0');
      if (n) HIPEP_ORT(g_ort->ReadOpAttr(attr, type, s.data(), n, &size));
      return text(std::string(s.c_str()));
    }
    case ORT_OP_ATTR_STRINGS: {
      // ORT writes the strings one after another, each terminated by '\0'.
      size_t n = byte_size(type);
      std::string s(n, '\0');
      if (n) HIPEP_ORT(g_ort->ReadOpAttr(attr, type, s.data(), n, &size));
      py::list out;
      size_t start = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\0') {
          out.append(text(s.substr(start, i - start)));
          start = i + 1;
        }
      }
      return out;
    }
    case ORT_OP_ATTR_TENSOR: {
      OrtValue* value = nullptr;
      HIPEP_ORT(g_ort->OpAttr_GetTensorAttributeAsOrtValue(attr, &value));
      if (value == nullptr) return py::none();
      py::object arr;
      try {
        arr = copy_to_numpy(value);
      } catch (...) {
        g_ort->ReleaseValue(value);
        throw;
      }
      g_ort->ReleaseValue(value);
      return arr;
    }
    default:
      return py::none();  // graphs arrive through Node_GetSubgraphs
  }
}

py::dict describe_node(const OrtNode* node, py::dict& types, bool copy_weights = false) {
  const char* s = nullptr;
  py::dict d;
  py::list invalid;  // what of this node is not valid UTF-8, for its rejection
  auto checked = [&](const char* what, const std::string& v) {
    if (!valid_utf8(v)) invalid.append(py::str(std::string(what) + " '") + text(v) + py::str("'"));
  };
  HIPEP_ORT(g_ort->Node_GetName(node, &s));
  std::string name = s ? s : "";
  checked("node name", name);
  d["name"] = text(name);
  HIPEP_ORT(g_ort->Node_GetOperatorType(node, &s));
  std::string op_type = s ? s : "";
  checked("op type", op_type);
  d["op_type"] = text(op_type);
  HIPEP_ORT(g_ort->Node_GetDomain(node, &s));
  std::string domain = s ? s : "";
  checked("domain", domain);
  d["domain"] = domain == "ai.onnx" ? py::str("") : text(domain);
  int since = 0;
  HIPEP_ORT(g_ort->Node_GetSinceVersion(node, &since));
  d["since_version"] = since;

  const char* labels[] = {"inputs", "outputs", "implicit_inputs"};
  for (int which = 0; which < 3; ++which) {
    py::list names;
    for (const OrtValueInfo* info : node_values(node, which)) {
      std::string vname = value_name(info);
      checked("value name", vname);
      names.append(value_key(vname));
      add_type(types, info);
    }
    d[labels[which]] = names;
  }

  size_t num_attrs = 0;
  HIPEP_ORT(g_ort->Node_GetNumAttributes(node, &num_attrs));
  std::vector<const OrtOpAttr*> attrs(num_attrs);
  if (num_attrs) HIPEP_ORT(g_ort->Node_GetAttributes(node, attrs.data(), num_attrs));
  py::dict attributes;
  for (const OrtOpAttr* attr : attrs) {
    const char* name = nullptr;
    HIPEP_ORT(g_ort->OpAttr_GetName(attr, &name));
    std::string aname = name ? name : "";
    checked("attribute name", aname);
    attributes[text(aname)] = read_attribute(attr);
  }
  d["attributes"] = attributes;

  size_t num_subgraphs = 0;
  HIPEP_ORT(g_ort->Node_GetNumSubgraphs(node, &num_subgraphs));
  py::dict subgraphs;
  if (num_subgraphs) {
    std::vector<const OrtGraph*> graphs(num_subgraphs);
    std::vector<const char*> names(num_subgraphs);
    HIPEP_ORT(g_ort->Node_GetSubgraphs(node, graphs.data(), num_subgraphs, names.data()));
    // Compiling: a Loop/If body's own large initializers (its Constant nodes, say) are read from
    // the fused node's weight store too, so their data is copied with the enclosing graph's.
    for (size_t i = 0; i < num_subgraphs; ++i)
      subgraphs[text(names[i] ? names[i] : "")] = describe_graph(graphs[i], nullptr, copy_weights,
                                                                  /*copy_outer=*/false);
  }
  d["subgraphs"] = subgraphs;
  if (!invalid.empty()) d["invalid_utf8"] = invalid;
  return d;
}

}  // namespace

std::vector<std::string> value_names(const OrtNode* node, bool outputs) {
  std::vector<std::string> names;
  for (const OrtValueInfo* info : node_values(node, outputs ? 1 : 0)) names.push_back(value_name(info));
  return names;
}

py::dtype numpy_dtype(ONNXTensorElementDataType type) {
  // numpy's built-in descriptors (a table lookup), where a dtype made from its name is parsed on
  // every call: Compute asks once per input and output per run
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return py::dtype::of<float>();
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return py::dtype::of<uint8_t>();
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return py::dtype::of<int8_t>();
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: return py::dtype::of<uint16_t>();
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: return py::dtype::of<int16_t>();
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return py::dtype::of<int32_t>();
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return py::dtype::of<int64_t>();
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return py::dtype::of<bool>();
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: {
      static py::dtype* half = new py::dtype("float16");  // made once, under the GIL; never freed
      return *half;
    }
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return py::dtype::of<double>();
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: return py::dtype::of<uint32_t>();
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: return py::dtype::of<uint64_t>();
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:  // numpy has no bf16: ml_dtypes (onnx's own) does
      return py::dtype::from_args(py::module_::import("ml_dtypes").attr("bfloat16"));
    default:
      throw std::runtime_error("ONNX element type " + std::to_string(static_cast<int>(type)) +
                               " has no numpy equivalent in hipep");
  }
}

TensorLayout tensor_layout(const OrtValue* value) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  HIPEP_ORT(g_ort->GetTensorTypeAndShape(value, &info));
  TensorLayout layout;
  size_t rank = 0;
  OrtStatus* st = g_ort->GetTensorElementType(info, &layout.elem);
  if (!st) st = g_ort->GetDimensionsCount(info, &rank);
  std::vector<int64_t> dims(rank);
  if (!st && rank) st = g_ort->GetDimensions(info, dims.data(), rank);
  g_ort->ReleaseTensorTypeAndShapeInfo(info);
  throw_on_error(st);
  layout.shape.assign(dims.begin(), dims.end());
  return layout;
}

namespace {

py::array copy_with_dtype(const OrtValue* value, const TensorLayout& layout, const py::dtype& dtype) {
  // For an external initializer this is where ORT maps the file; the bytes are copied once,
  // straight into the array numpy allocates (no staging copy).
  const void* data = nullptr;
  HIPEP_ORT(g_ort->GetTensorData(value, &data));
  py::array out(dtype, layout.shape);
  if (out.nbytes()) std::memcpy(out.mutable_data(), data, out.nbytes());
  return out;
}

}  // namespace

namespace {

// ORT maps an external initializer's file when its value is first asked for, and a file shorter
// than the initializer's offset + length fails there with an error that names no file. Checked
// before asking: the error names the initializer, the file, and the bytes expected and found. A
// file that is missing or unreadable is left to ORT's own error, which names it.
void check_external_data(const OrtGraph* graph, const OrtValueInfo* info, const std::string& name) {
  OrtExternalInitializerInfo* external = nullptr;
  HIPEP_ORT(g_ort->ValueInfo_GetExternalInitializerInfo(info, &external));
  if (external == nullptr) return;
  std::filesystem::path location = g_ort->ExternalInitializerInfo_GetFilePath(external);
  int64_t offset = g_ort->ExternalInitializerInfo_GetFileOffset(external);
  size_t length = g_ort->ExternalInitializerInfo_GetByteSize(external);
  g_ort->ReleaseExternalInitializerInfo(external);
  // The location is relative to the model's folder; a model given as bytes reads from the working
  // directory, as ORT does.
  const ORTCHAR_T* model_path = nullptr;
  HIPEP_ORT(g_ort->Graph_GetModelPath(graph, &model_path));
  std::filesystem::path file = location;
  if (model_path != nullptr && model_path[0] != 0) file = std::filesystem::path(model_path).parent_path() / location;
  std::error_code error;
  uintmax_t size = std::filesystem::file_size(file, error);
  if (error || offset < 0) return;
  uintmax_t end = static_cast<uintmax_t>(offset) + length;
  if (end <= size) return;
  throw std::runtime_error("external data of initializer '" + name + "': file '" + file.string() + "' holds " +
                           std::to_string(size) + " bytes, but the initializer's offset " + std::to_string(offset) +
                           " + length " + std::to_string(length) + " needs " + std::to_string(end) + " (" +
                           std::to_string(end - size) + " bytes missing)");
}

}  // namespace

py::array copy_to_numpy(const OrtValue* value) {
  TensorLayout layout = tensor_layout(value);
  return copy_with_dtype(value, layout, numpy_dtype(layout.elem));
}

py::object copy_to_numpy_if_possible(const OrtValue* value) {
  TensorLayout layout = tensor_layout(value);
  py::dtype dtype;
  try {
    dtype = numpy_dtype(layout.elem);
  } catch (const std::runtime_error&) {
    return py::none();
  }
  return copy_with_dtype(value, layout, dtype);
}

py::object describe_parent(const OrtGraph* graph) {
  const OrtNode* parent = nullptr;
  HIPEP_ORT(g_ort->Graph_GetParentNode(graph, &parent));
  if (parent == nullptr) return py::none();
  py::dict types;
  py::dict node = describe_node(parent, types);
  py::dict d;
  d["node"] = node;
  d["types"] = types;
  return d;
}

py::dict describe_graph(const OrtGraph* graph, std::vector<const OrtNode*>* nodes_out, bool copy_weights,
                        bool copy_outer) {
  py::dict d;
  py::dict types;
  const char* name = nullptr;
  HIPEP_ORT(g_ort->Graph_GetName(graph, &name));
  d["name"] = text(name ? name : "");

  size_t num_opsets = 0;
  HIPEP_ORT(g_ort->Graph_GetNumOperatorSets(graph, &num_opsets));
  py::dict opsets;
  if (num_opsets) {
    std::vector<const char*> domains(num_opsets);
    std::vector<int64_t> versions(num_opsets);
    HIPEP_ORT(g_ort->Graph_GetOperatorSets(graph, domains.data(), versions.data(), num_opsets));
    for (size_t i = 0; i < num_opsets; ++i) {
      std::string dom = domains[i] ? domains[i] : "";
      opsets[text(dom == "ai.onnx" ? "" : dom)] = versions[i];
    }
  }
  d["opsets"] = opsets;

  // Constant initializers: small ones copied, large ones named (and copied for Compile).
  size_t num_inits = 0;
  HIPEP_ORT(g_ort->Graph_GetNumInitializers(graph, &num_inits));
  std::vector<const OrtValueInfo*> inits(num_inits);
  if (num_inits) HIPEP_ORT(g_ort->Graph_GetInitializers(graph, inits.data(), num_inits));
  size_t num_nodes = 0;
  HIPEP_ORT(g_ort->Graph_GetNumNodes(graph, &num_nodes));
  std::vector<const OrtNode*> nodes(num_nodes);
  if (num_nodes) HIPEP_ORT(g_ort->Graph_GetNodes(graph, nodes.data(), num_nodes));
  if (copy_weights && copy_outer) {
    // A fused subgraph inside a Loop/If body may read constant initializers of an enclosing graph.
    // They are not among this graph's initializers, and with drop_constant_initializers ORT does
    // not pass them in either: they are this graph's to copy too.
    std::set<std::string> seen;
    for (const OrtValueInfo* info : inits) seen.insert(value_name(info));
    for (const OrtNode* node : nodes) {
      for (int which : {0, 2}) {
        for (const OrtValueInfo* info : node_values(node, which)) {
          if (info == nullptr) continue;
          bool outer = false;
          HIPEP_ORT(g_ort->ValueInfo_IsFromOuterScope(info, &outer));
          if (outer && seen.insert(value_name(info)).second) inits.push_back(info);
        }
      }
    }
  }
  py::dict constants;
  py::list weights;
  py::dict weight_data;
  for (const OrtValueInfo* info : inits) {
    add_type(types, info);
    bool is_constant = false;
    HIPEP_ORT(g_ort->ValueInfo_IsConstantInitializer(info, &is_constant));
    // An overridable initializer is a graph input, and so is an outer value no initializer.
    if (!is_constant) continue;
    std::string vname = value_name(info);
    check_external_data(graph, info, vname);
    const OrtValue* value = nullptr;
    HIPEP_ORT(g_ort->ValueInfo_GetInitializerValue(info, &value));
    if (value == nullptr) continue;  // an outer-scope value that is no initializer
    size_t count = 0;
    if (value != nullptr) {
      OrtTensorTypeAndShapeInfo* tinfo = nullptr;
      HIPEP_ORT(g_ort->GetTensorTypeAndShape(value, &tinfo));
      OrtStatus* st = g_ort->GetTensorShapeElementCount(tinfo, &count);
      g_ort->ReleaseTensorTypeAndShapeInfo(tinfo);
      throw_on_error(st);
    }
    if (value != nullptr && count <= kSmallConstantElements) {
      py::object small = copy_to_numpy_if_possible(value);
      if (!small.is_none()) {
        constants[value_key(vname)] = small;
        continue;
      }
      // An element type numpy lacks: keep it as a weight; claim predicates see its type.
    }
    weights.append(value_key(vname));
    if (copy_weights && value != nullptr && count > kSmallConstantElements) {
      py::object arr = copy_to_numpy_if_possible(value);
      if (!arr.is_none()) weight_data[value_key(vname)] = arr;  // else no plan can read it anyway
    }
  }
  d["constants"] = constants;
  d["weights"] = weights;
  if (copy_weights) d["weight_data"] = weight_data;

  auto graph_values = [&](bool outputs) {
    size_t n = 0;
    std::vector<const OrtValueInfo*> v;
    if (outputs) {
      HIPEP_ORT(g_ort->Graph_GetNumOutputs(graph, &n));
      v.resize(n);
      if (n) HIPEP_ORT(g_ort->Graph_GetOutputs(graph, v.data(), n));
    } else {
      HIPEP_ORT(g_ort->Graph_GetNumInputs(graph, &n));
      v.resize(n);
      if (n) HIPEP_ORT(g_ort->Graph_GetInputs(graph, v.data(), n));
    }
    py::list names;
    for (const OrtValueInfo* info : v) {
      py::str vname = value_key(value_name(info));
      add_type(types, info);
      if (!outputs && constants.contains(vname)) continue;
      names.append(vname);
    }
    return names;
  };
  d["inputs"] = graph_values(false);
  d["outputs"] = graph_values(true);

  py::list node_list;
  for (const OrtNode* node : nodes) node_list.append(describe_node(node, types, copy_weights));
  d["nodes"] = node_list;
  d["types"] = types;
  if (nodes_out) *nodes_out = std::move(nodes);
  return d;
}

}  // namespace hipep
