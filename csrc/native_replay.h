// A plan run replayed from Compute without Python: the CUDA graphs a run on hipep's cuda device
// captured, launched again for ORT's tensors once Python has recorded how a run of that shape
// looks (hipep/runtime/native_replay.py builds the record). Everything that can differ between
// runs is looked up, not computed: the record holds, per set of input shapes it has seen or
// predicted, the output shapes, the host values the graphs read and the kernel nodes' parameters
// (bound by Python's bindings); tensors ORT moved are followed by relocating the parameter fields
// Python found to hold their addresses. Anything else (a shape, dtype, memory or pointer the
// record does not hold) is a miss, and the run goes through Python as before.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>

#include "ort_api.h"

namespace hipep {

class NativeReplay;

// What a CompiledSubgraph and its ComputeInfo share: the record Compute tries first (none until
// Python installs one).
class ReplaySlot {
 public:
  std::shared_ptr<NativeReplay> get() {
    std::lock_guard<std::mutex> lock(mu_);
    return record_;
  }
  void set(std::shared_ptr<NativeReplay> record) {
    std::lock_guard<std::mutex> lock(mu_);
    record_ = std::move(record);
  }

 private:
  std::mutex mu_;
  std::shared_ptr<NativeReplay> record_;
};

// Runs `context` from `slot`'s record: true when the record ran it (`*status` then holds the
// run's error, or nullptr), false on a miss (nothing was queued; outputs may have been obtained
// from ORT, with the shapes Python will ask for). Never throws.
bool try_native_replay(ReplaySlot& slot, OrtKernelContext* context, const std::string& running,
                       OrtStatus** status) noexcept;

// Registers NativeReplay and ReplaySlot in hipep's Python module.
void register_native_replay(pybind11::module_& m);

}  // namespace hipep
