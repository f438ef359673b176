// Access to ONNX Runtime's C API for the hipep plugin.
//
// hipep asks ORT for API version 23 explicitly: every onnxruntime >= 1.23 serves it, and a newer
// header set at build time changes nothing at run time.
#pragma once

#include <onnxruntime_c_api.h>

#include <string>

namespace hipep {

constexpr uint32_t kOrtApiVersion = 23;
constexpr const char* kEpName = "HipExecutionProvider";  // hipep's best device: a GPU when there is one
// The CPU reference device, in host memory, beside a GPU EP: ORT requires every EP device one EP
// is selected with to agree on memory, so the host-memory device has a name of its own.
constexpr const char* kCpuEpName = "HipCpuExecutionProvider";
// Names of the memory infos of a GPU's device memory and of its pinned host memory.
constexpr const char* kDeviceMemoryName = "HipepGpu";
constexpr const char* kPinnedMemoryName = "HipepGpuPinned";
constexpr const char* kVendor = "hipep";
constexpr const char* kVersion = "0.1.0";

extern const OrtApi* g_ort;
extern const OrtEpApi* g_ep_api;

// Turns an OrtStatus into a C++ exception (releasing the status).
void throw_on_error(OrtStatus* status);

// A new OrtStatus carrying `message` (ORT takes ownership).
OrtStatus* make_status(OrtErrorCode code, const std::string& message);

}  // namespace hipep

#define HIPEP_ORT(call) ::hipep::throw_on_error(call)
