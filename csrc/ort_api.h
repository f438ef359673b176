// Access to ONNX Runtime's C API for the hipep plugin.
//
// hipep asks ORT for API version 23 explicitly: every onnxruntime >= 1.23 serves it, and a newer
// header set at build time changes nothing at run time.
#pragma once

#include <onnxruntime_c_api.h>

#include <string>

namespace hipep {

constexpr uint32_t kOrtApiVersion = 23;
constexpr const char* kEpName = "HipExecutionProvider";
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
