// Debugging aids, never named by a plan or a binding.
//
// hipep_debug_spin keeps its stream busy for `cycles` clock cycles, so that device work queued
// after it runs late. The CUDA device queues it before every launch of one op type when
// HIPEP_DEBUG_SPIN_BEFORE=<op type>:<microseconds> is set: host work that does not wait for the
// device where it must (a missing sync, a host buffer sharing storage with a device one) then
// overtakes the queued work every time instead of now and then (tests/gpu/test_gpu_hazard.py).
// clock64() counts SM clock cycles on NVIDIA and shader clock cycles on AMD; the runtime converts
// microseconds with the device's reported clock rate, so the wait is approximate.
#include "hipep_device.h"

HIPEP_KERNEL void hipep_debug_spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
