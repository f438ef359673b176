// Replay of a plan run from Compute without Python (see native_replay.h). The record is built and
// extended by hipep/runtime/native_replay.py; this file only looks up, compares, copies bytes and
// calls the driver through the entry points Python hands over (the real driver's from
// cuGetProcAddress, or the host stand-in's).
#include "native_replay.h"

#include <pybind11/stl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "plugin.h"

namespace py = pybind11;

namespace hipep {
namespace {

// A Python object C++ may drop on any thread: with the GIL, and never after the interpreter is gone.
class Held {
 public:
  Held() = default;
  explicit Held(py::object obj) : obj_(obj.release().ptr()) {}
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  ~Held() { reset(); }
  void reset() {
    if (obj_ != nullptr && python_usable()) {
      py::gil_scoped_acquire gil;
      Py_DECREF(obj_);
    }
    obj_ = nullptr;
  }
  void set(py::object obj) {
    reset();
    obj_ = obj.release().ptr();
  }
  PyObject* get() const { return obj_; }

 private:
  PyObject* obj_ = nullptr;
};

// The CUDA driver's calling convention (CUresult is an int, 0 success; handles are pointers).
struct Driver {
  int (*graph_launch)(void* exec, void* stream) = nullptr;
  int (*node_set_params)(void* exec, void* node, const void* params) = nullptr;
  int (*stream_synchronize)(void* stream) = nullptr;
  int (*event_record)(void* event, void* stream) = nullptr;
  int (*event_elapsed)(float* ms, void* start, void* end) = nullptr;
  int (*ctx_get_current)(void** ctx) = nullptr;
  int (*ctx_set_current)(void* ctx) = nullptr;
};

template <typename F>
F entry(const py::dict& table, const char* name) {
  if (!table.contains(name)) throw std::invalid_argument(std::string("NativeReplay: no driver entry point ") + name);
  auto address = table[name].cast<uintptr_t>();
  if (address == 0) throw std::invalid_argument(std::string("NativeReplay: driver entry point ") + name + " is null");
  return reinterpret_cast<F>(address);
}

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const noexcept {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : key) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// One ORT tensor position as the record saw it.
struct Position {
  bool present = true;
  int elem = 0;
  uintptr_t ptr = 0;         // the address the record's parameters were bound for
  bool relocatable = false;  // may move: fields holding it are relocated
  int alias = 0;             // the first position (inputs, then outputs) with the same address
};

// A parameter field holding a tensor's address: written as `base` + how far the tensor moved.
struct Relocation {
  uint64_t* field;
  uint64_t base;
  int position;  // inputs first, then outputs
};

struct NodeSetting {
  uintptr_t params = 0;  // the CUDA_KERNEL_NODE_PARAMS the node is set from
  uint64_t serial = 0;   // which launch those are (Python numbers them; never reused)
  std::vector<Relocation> relocations;
};

struct Variant {
  std::shared_ptr<Held> keep;  // the launches its settings point into
  int64_t ordinal = -1;  // its place along the shapes' growth Python predicted (-1: none)
  std::vector<std::vector<int64_t>> output_shapes;
  std::vector<std::pair<void*, std::string>> fills;  // host address, bytes
  std::vector<NodeSetting> nodes;                      // one per managed node
  int64_t launches = 0;
};

// What a managed node holds now: the launch it was set from and every relocated field's value.
struct NodeState {
  uint64_t serial = 0;
  std::vector<uint64_t> fields;
};

}  // namespace

class NativeReplay {
 public:
  NativeReplay(std::string name, const py::dict& driver, uintptr_t cu_context, uintptr_t stream,
               uintptr_t start_event, uintptr_t end_event, uintptr_t fault_record, uintptr_t tally,
               std::vector<int> tally_fields, py::object on_error)
      : name_(std::move(name)),
        context_(reinterpret_cast<void*>(cu_context)),
        stream_(reinterpret_cast<void*>(stream)),
        start_(reinterpret_cast<void*>(start_event)),
        end_(reinterpret_cast<void*>(end_event)),
        fault_(reinterpret_cast<const uint32_t*>(fault_record)),
        tally_(reinterpret_cast<int64_t*>(tally)),
        fields_(std::move(tally_fields)),
        on_error_(std::move(on_error)) {
    if (fields_.size() != kFields) throw std::invalid_argument("NativeReplay: tally_fields needs 9 indexes");
    d_.graph_launch = entry<decltype(d_.graph_launch)>(driver, "cuGraphLaunch");
    d_.node_set_params = entry<decltype(d_.node_set_params)>(driver, "cuGraphExecKernelNodeSetParams");
    d_.stream_synchronize = entry<decltype(d_.stream_synchronize)>(driver, "cuStreamSynchronize");
    d_.event_record = entry<decltype(d_.event_record)>(driver, "cuEventRecord");
    d_.event_elapsed = entry<decltype(d_.event_elapsed)>(driver, "cuEventElapsedTime");
    d_.ctx_get_current = entry<decltype(d_.ctx_get_current)>(driver, "cuCtxGetCurrent");
    d_.ctx_set_current = entry<decltype(d_.ctx_set_current)>(driver, "cuCtxSetCurrent");
  }

  // ---- built from Python: its objects are read with the GIL, the record changed under the lock
  // without it (a run in flight may need the GIL: the stand-in's entry points, errors) -----------

  void set_io(const py::list& inputs, const py::list& outputs) {
    std::vector<Position> in = positions(inputs), out = positions(outputs);
    std::vector<int> relocatable;
    for (size_t p = 0; p < in.size() + out.size(); ++p)
      if ((p < in.size() ? in[p] : out[p - in.size()]).relocatable) relocatable.push_back(static_cast<int>(p));
    locked([&] {
      in_ = std::move(in);
      out_ = std::move(out);
      relocatable_ = std::move(relocatable);
      now_.assign(in_.size() + out_.size(), 0);
    });
  }

  void set_graphs(const std::vector<uintptr_t>& execs, const py::list& managed) {
    std::vector<void*> exec_handles;
    for (auto e : execs) exec_handles.push_back(reinterpret_cast<void*>(e));
    std::vector<std::pair<void*, void*>> nodes;
    std::vector<NodeState> first;  // what each node holds if it is new to the record
    for (auto item : managed) {
      // (exec, node, params now set, their serial, [field addresses])
      auto t = item.cast<py::tuple>();
      nodes.emplace_back(reinterpret_cast<void*>(t[0].cast<uintptr_t>()), reinterpret_cast<void*>(t[1].cast<uintptr_t>()));
      NodeState s;
      s.serial = t[3].cast<uint64_t>();
      for (auto f : t[4].cast<py::list>()) s.fields.push_back(*reinterpret_cast<uint64_t*>(f.cast<uintptr_t>()));
      first.push_back(std::move(s));
    }
    decltype(variants_) dropped;  // freed after the lock, with the GIL (they hold Python objects)
    locked([&] {
      execs_ = std::move(exec_handles);
      // A node managed already keeps what it holds now (runs may have set it); a new one holds
      // the launch it was captured or last updated with.
      std::vector<NodeState> state;
      for (size_t n = 0; n < nodes.size(); ++n) {
        size_t known = 0;
        while (known < managed_.size() && managed_[known] != nodes[n]) ++known;
        state.push_back(known < managed_.size() ? state_[known] : first[n]);
      }
      managed_ = std::move(nodes);
      state_ = std::move(state);
      dropped.swap(variants_);  // Python adds every variant again, with a setting for each node
    });
  }

  // key: the inputs' shapes flattened (rank, then extents; -1 for an absent input)
  void add_variant(const std::vector<int64_t>& key, const std::vector<std::vector<int64_t>>& output_shapes,
                   const py::list& fills, const py::list& nodes, int64_t launches, int64_t ordinal, py::object keep) {
    Variant v;
    v.keep = std::make_shared<Held>(std::move(keep));
    v.ordinal = ordinal;
    v.output_shapes = output_shapes;
    v.launches = launches;
    for (auto item : fills) {
      auto t = item.cast<py::tuple>();
      v.fills.emplace_back(reinterpret_cast<void*>(t[0].cast<uintptr_t>()), t[1].cast<std::string>());
    }
    for (auto item : nodes) {
      auto t = item.cast<py::tuple>();  // (params, serial, [(field address, base value, position)])
      NodeSetting s;
      s.params = t[0].cast<uintptr_t>();
      s.serial = t[1].cast<uint64_t>();
      for (auto r : t[2].cast<py::list>()) {
        auto rt = r.cast<py::tuple>();
        s.relocations.push_back({reinterpret_cast<uint64_t*>(rt[0].cast<uintptr_t>()), rt[1].cast<uint64_t>(),
                                 rt[2].cast<int>()});
      }
      v.nodes.push_back(std::move(s));
    }
    std::string wrong;
    locked([&] {
      if (output_shapes.size() != out_.size()) {
        wrong = std::to_string(output_shapes.size()) + " output shapes for " + std::to_string(out_.size()) + " outputs";
        return;
      }
      if (v.nodes.size() != managed_.size()) {
        wrong = "settings for " + std::to_string(v.nodes.size()) + " nodes, the record manages " +
                std::to_string(managed_.size());
        return;
      }
      for (const auto& n : v.nodes)
        for (const auto& r : n.relocations)
          if (r.position < 0 || static_cast<size_t>(r.position) >= in_.size() + out_.size())
            wrong = "a relocation of position " + std::to_string(r.position);
      if (wrong.empty()) std::swap(variants_[key], v);  // (a variant replaced is freed below)
    });
    if (!wrong.empty()) throw std::invalid_argument("NativeReplay.add_variant: " + wrong);
  }

  void remove_variant(const std::vector<int64_t>& key) {
    std::shared_ptr<Held> keep;  // dropped here, with the GIL, after the lock
    locked([&] {
      auto found = variants_.find(key);
      if (found == variants_.end()) return;
      keep = std::move(found->second.keep);
      variants_.erase(found);
    });
  }

  void keep(py::object obj) { kept_.push_back(std::make_unique<Held>(std::move(obj))); }

  // ---- learning ahead: a run close to the last predicted shapes wakes Python's learner -----------

  // The last ordinal predicted, and how close a run may come to it before more are asked for.
  void set_frontier(int64_t frontier, int64_t low_water) {
    std::lock_guard<std::mutex> lock(need_mu_);
    frontier_ = frontier;
    low_water_ = low_water;
  }
  // Where a run that asks for more variants writes a byte (a pipe Python's learner thread waits on
  // in select: a thread blocked in Python's own wait ends cleanly with the interpreter).
  void set_wakeup(int fd) {
    std::lock_guard<std::mutex> lock(need_mu_);
    wake_fd_ = closed_ ? -1 : fd;
  }
  // The frontier a run asked to extend since the last call, or -1.
  int64_t take_need() {
    std::lock_guard<std::mutex> lock(need_mu_);
    int64_t need = need_;
    need_ = -1;
    return need;
  }
  // No more wake-ups (the pipe may close after this returns); wakes the learner once more.
  void close() {
    std::lock_guard<std::mutex> lock(need_mu_);
    wake();
    closed_ = true;
    wake_fd_ = -1;
  }

  // ---- a run ---------------------------------------------------------------------------------

  bool try_run(OrtKernelContext* ctx, const std::string& running, OrtStatus** status) {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock() || broken_) return miss("busy or broken");
    auto started = std::chrono::steady_clock::now();
    size_t n_in = 0, n_out = 0;
    HIPEP_ORT(g_ort->KernelContext_GetInputCount(ctx, &n_in));
    HIPEP_ORT(g_ort->KernelContext_GetOutputCount(ctx, &n_out));
    if (n_in != in_.size() || n_out != out_.size()) return miss("input or output count");
    key_.clear();
    for (size_t i = 0; i < n_in; ++i) {
      const OrtValue* value = nullptr;
      HIPEP_ORT(g_ort->KernelContext_GetInput(ctx, i, &value));
      const Position& p = in_[i];
      if (value == nullptr || !p.present) {
        if ((value == nullptr) == p.present) return miss("input presence");
        key_.push_back(-1);
        continue;
      }
      if (!read_tensor(value, p, i, true)) return miss(why_);
    }
    auto found = variants_.find(key_);
    if (found == variants_.end()) return miss("shapes");
    const Variant& v = found->second;
    for (size_t j = 0; j < n_out; ++j) {
      const auto& shape = v.output_shapes[j];
      OrtValue* value = nullptr;
      HIPEP_ORT(g_ort->KernelContext_GetOutput(ctx, j, shape.data(), shape.size(), &value));
      if (!read_tensor(value, out_[j], in_.size() + j, false)) return miss(why_);
    }
    for (int p : relocatable_) {  // addresses equal where the record's were, and only there
      for (size_t q = 0; q < now_.size(); ++q) {
        if (static_cast<size_t>(p) == q || !at(q).present) continue;
        if ((now_[p] == now_[q]) != (at(p).alias == at(q).alias)) return miss("aliasing");
      }
    }
    if (!replay(v, running, status)) return miss("a node update the driver refused");
    runs_ += 1;
    if (v.ordinal >= 0) ask_ahead(v.ordinal);
    auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started);
    add(kRunNs, elapsed.count());
    return true;
  }

  uint64_t runs() const { return runs_; }
  uint64_t misses() const { return misses_; }
  std::string last_miss() const { return last_miss_ ? last_miss_ : ""; }
  bool broken() const { return broken_; }
  // The last run's addresses (inputs, then outputs) and input shape key: what a check of the
  // parameters it set binds again.
  py::tuple last_run() {
    std::vector<uintptr_t> now;
    std::vector<int64_t> key;
    locked([&] {
      now = now_;
      key = key_;
    });
    return py::make_tuple(now, key);
  }
  // The serial of the launch each managed node was last set from.
  std::vector<uint64_t> node_serials() {
    std::vector<uint64_t> out;
    locked([&] {
      for (auto& st : state_) out.push_back(st.serial);
    });
    return out;
  }

 private:
  enum Field { kLaunches, kHits, kHostReads, kKernelNs, kGraphs, kNodeUpdates, kRunNs, kSyncWaitNs, kNativeRuns };
  static constexpr size_t kFields = 9;

  // Runs `change` (C++ only) under the record's lock, waiting for a run in flight without the GIL
  // (the run may need it); a run only ever try_locks.
  template <typename F>
  void locked(F&& change) {
    if (PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      std::lock_guard<std::mutex> lock(mu_);
      change();
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      change();
    }
  }

  static std::vector<Position> positions(const py::list& items) {
    std::vector<Position> out;
    for (auto item : items) {
      Position p;
      if (item.is_none()) {
        p.present = false;
      } else {
        auto t = item.cast<py::tuple>();  // (elem, address, relocatable, alias)
        p.elem = t[0].cast<int>();
        p.ptr = t[1].cast<uintptr_t>();
        p.relocatable = t[2].cast<bool>();
        p.alias = t[3].cast<int>();
      }
      out.push_back(p);
    }
    return out;
  }

  const Position& at(size_t p) const { return p < in_.size() ? in_[p] : out_[p - in_.size()]; }

  bool read_tensor(const OrtValue* value, const Position& p, size_t position, bool shape_into_key) {
    const OrtMemoryDevice* md = g_ep_api->Value_GetMemoryDevice(value);
    if (md == nullptr || g_ep_api->MemoryDevice_GetDeviceType(md) != OrtMemoryInfoDeviceType_GPU ||
        g_ep_api->MemoryDevice_GetMemoryType(md) != OrtDeviceMemoryType_DEFAULT) {
      why_ = "a tensor outside device memory";
      return false;
    }
    OrtTensorTypeAndShapeInfo* info = nullptr;
    HIPEP_ORT(g_ort->GetTensorTypeAndShape(value, &info));
    ONNXTensorElementDataType elem = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t rank = 0;
    OrtStatus* st = g_ort->GetTensorElementType(info, &elem);
    if (!st) st = g_ort->GetDimensionsCount(info, &rank);
    if (!st && shape_into_key) {
      size_t at = key_.size();
      key_.push_back(static_cast<int64_t>(rank));
      key_.resize(at + 1 + rank);
      if (rank) st = g_ort->GetDimensions(info, key_.data() + at + 1, rank);
    }
    g_ort->ReleaseTensorTypeAndShapeInfo(info);
    throw_on_error(st);
    if (static_cast<int>(elem) != p.elem) {
      why_ = "element type";
      return false;
    }
    void* data = nullptr;
    HIPEP_ORT(g_ort->GetTensorMutableData(const_cast<OrtValue*>(value), &data));
    auto ptr = reinterpret_cast<uintptr_t>(data);
    // A moved tensor keeps its address's low bits (bindings may choose vector widths by alignment).
    if (ptr != p.ptr && (!p.relocatable || ((ptr - p.ptr) & 255u) != 0)) {
      why_ = p.relocatable ? "an address of another alignment" : "a tensor at another address";
      return false;
    }
    now_[position] = ptr;
    return true;
  }

  void ask_ahead(int64_t ordinal) {
    std::lock_guard<std::mutex> lock(need_mu_);
    if (ordinal + low_water_ <= frontier_ || asked_ == frontier_) return;
    asked_ = frontier_;  // once per frontier
    need_ = frontier_;
    wake();
  }

  void wake() {  // (under need_mu_)
    if (wake_fd_ < 0) return;
    char byte = 1;
    if (::write(wake_fd_, &byte, 1) < 0) {
      // a full pipe already holds a wake-up
    }
  }

  bool miss(const char* why) {
    misses_ += 1;
    last_miss_ = why;
    return false;
  }

  void add(Field f, int64_t by) { tally_[fields_[f]] += by; }

  // Queues the variant's graphs for this run's tensors and waits for them; `*status`: the run's
  // error or nullptr. False where nothing was queued and the run must go through Python.
  bool replay(const Variant& v, const std::string& running, OrtStatus** status) {
    void* current = nullptr;
    if (d_.ctx_get_current(&current) != 0 || current != context_) {
      if (int err = d_.ctx_set_current(context_)) {
        *status = fail(running, "context", err, 0);
        return true;
      }
    }
    for (const auto& fill : v.fills) std::memcpy(fill.first, fill.second.data(), fill.second.size());
    int64_t updates = 0;
    for (size_t n = 0; n < managed_.size(); ++n) {
      const NodeSetting& s = v.nodes[n];
      NodeState& now = state_[n];
      fields_now_.clear();
      for (const auto& r : s.relocations)
        fields_now_.push_back(r.base + (now_[r.position] - at(r.position).ptr));
      if (now.serial == s.serial && now.fields == fields_now_) continue;
      for (size_t k = 0; k < s.relocations.size(); ++k) *s.relocations[k].field = fields_now_[k];
      if (d_.node_set_params(managed_[n].first, managed_[n].second, reinterpret_cast<void*>(s.params))) {
        // The graph may hold some of this run's parameters: the record is done, and the run
        // goes through Python (which captures its graphs again where an update is refused).
        broken_ = true;
        return false;
      }
      now.serial = s.serial;
      now.fields = fields_now_;
      updates += 1;
    }
    d_.event_record(start_, stream_);
    for (size_t g = 0; g < execs_.size(); ++g) {
      if (int err = d_.graph_launch(execs_[g], stream_)) {
        broken_ = true;
        *status = fail(running, "launch", err, static_cast<int>(g));
        return true;
      }
    }
    d_.event_record(end_, stream_);
    auto waited = std::chrono::steady_clock::now();
    int err = d_.stream_synchronize(stream_);
    add(kSyncWaitNs, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - waited).count());
    add(kLaunches, v.launches);
    add(kHits, 1);
    add(kGraphs, static_cast<int64_t>(execs_.size()));
    add(kNodeUpdates, updates);
    add(kNativeRuns, 1);
    if (err) {
      broken_ = true;
      *status = fail(running, "sync", err, 0);
      return true;
    }
    float ms = 0.f;
    if (d_.event_elapsed(&ms, start_, end_) == 0) add(kKernelNs, static_cast<int64_t>(ms * 1e6));
    if (*fault_ != 0) *status = fail(running, "fault", 0, 0);  // a kernel's input check failed
    return true;
  }

  // The run's error, worded by Python (hipep.runtime.native_replay) like the Python path's.
  OrtStatus* fail(const std::string& running, const char* what, int code, int index) {
    std::string detail = std::string(what) + " failed with CUresult " + std::to_string(code);
    if (python_usable()) {
      py::gil_scoped_acquire gil;
      try {
        py::handle(on_error_.get())(what, code, index);
      } catch (py::error_already_set& e) {
        detail = py::str(e.type().attr("__name__")).cast<std::string>() + ": " + py::str(e.value()).cast<std::string>();
      } catch (const std::exception& e) {
        detail = e.what();
      }
    }
    return make_status(ORT_FAIL, "hipep: " + running + " failed: " + detail);
  }

  std::string name_;
  Driver d_;
  void* context_;
  void* stream_;
  void* start_;
  void* end_;
  const uint32_t* fault_;
  int64_t* tally_;
  std::vector<int> fields_;
  Held on_error_;
  std::vector<std::unique_ptr<Held>> kept_;

  std::mutex mu_;
  bool broken_ = false;
  std::vector<Position> in_, out_;
  std::vector<int> relocatable_;
  std::vector<void*> execs_;
  std::vector<std::pair<void*, void*>> managed_;  // (exec, node)
  std::vector<NodeState> state_;
  std::unordered_map<std::vector<int64_t>, Variant, KeyHash> variants_;
  // per run (under mu_)
  std::vector<int64_t> key_;
  std::vector<uintptr_t> now_;
  std::vector<uint64_t> fields_now_;
  const char* why_ = "";
  uint64_t runs_ = 0, misses_ = 0;
  const char* last_miss_ = nullptr;
  // learning ahead (need_mu_)
  std::mutex need_mu_;
  int64_t frontier_ = -1, low_water_ = 0, asked_ = -1, need_ = -1;
  int wake_fd_ = -1;
  bool closed_ = false;
};

bool try_native_replay(ReplaySlot& slot, OrtKernelContext* context, const std::string& running,
                       OrtStatus** status) noexcept {
  *status = nullptr;
  std::shared_ptr<NativeReplay> record = slot.get();
  if (!record) return false;
  try {
    return record->try_run(context, running, status);
  } catch (const std::exception& e) {  // an ORT call failed: the Python path will say it again
    return false;
  }
}

void register_native_replay(py::module_& m) {
  py::class_<ReplaySlot, std::shared_ptr<ReplaySlot>>(m, "ReplaySlot",
                                                      "The native replay record a compiled subgraph's Compute tries first.")
      .def("install", [](ReplaySlot& s, std::shared_ptr<NativeReplay> r) { s.set(std::move(r)); })
      .def("clear", [](ReplaySlot& s) { s.set(nullptr); })
      .def("get", [](ReplaySlot& s) { return s.get(); });
  py::class_<NativeReplay, std::shared_ptr<NativeReplay>>(m, "NativeReplay",
                                                          "A plan's captured CUDA graphs, replayed from Compute "
                                                          "(built by hipep.runtime.native_replay).")
      .def(py::init<std::string, py::dict, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t,
                    std::vector<int>, py::object>(),
           py::arg("name"), py::arg("driver"), py::arg("context"), py::arg("stream"), py::arg("start_event"),
           py::arg("end_event"), py::arg("fault_record"), py::arg("tally"), py::arg("tally_fields"),
           py::arg("on_error"))
      .def("set_io", &NativeReplay::set_io)
      .def("set_graphs", &NativeReplay::set_graphs)
      .def("add_variant", &NativeReplay::add_variant)
      .def("keep", &NativeReplay::keep)
      .def("set_frontier", &NativeReplay::set_frontier)
      .def("set_wakeup", &NativeReplay::set_wakeup)
      .def("take_need", &NativeReplay::take_need)
      .def("close", &NativeReplay::close)
      .def("last_run", &NativeReplay::last_run)
      .def("node_serials", &NativeReplay::node_serials)
      .def("remove_variant", &NativeReplay::remove_variant)
      .def_property_readonly("runs", &NativeReplay::runs)
      .def_property_readonly("misses", &NativeReplay::misses)
      .def_property_readonly("last_miss", &NativeReplay::last_miss)
      .def_property_readonly("broken", &NativeReplay::broken);
}

}  // namespace hipep
