// The event API of the CPU and CL devices (runtime/device.h: Device::record_event), and the out-of-memory
// error every device's allocator raises. The GPU devices' events are tested on the fake driver
// (tests/test_cuda.cpp, tests/test_hip.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "runtime/device.h"

using namespace tiny;
using namespace tiny::runtime;

TEST(DeviceEvents, ACpuEventIsDoneWhenRecordedAndMeasuresTheHostClockBetween) {
  Device& d = cpu_device();
  auto start = d.record_event();
  EXPECT_TRUE(start->query());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto end = d.record_event();
  end->synchronize();
  double ms = start->elapsed_ms(*end);
  EXPECT_GE(ms, 19.0);
  EXPECT_LT(ms, 5000.0);
  auto untimed = d.record_event(false);
  EXPECT_THROW(start->elapsed_ms(*untimed), std::runtime_error);
}

TEST(DeviceEvents, AClEventIsDoneOnceTheQueuePassedItAndMeasuresTheTimeBetween) {
  Device* d = nullptr;
  try {
    d = &cl_device();
  } catch (const std::runtime_error& e) {
    GTEST_SKIP() << e.what();
  }
  auto start = d->record_event();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto end = d->record_event();
  end->synchronize();
  EXPECT_TRUE(end->query());
  EXPECT_TRUE(start->query());
  double ms = start->elapsed_ms(*end);
  EXPECT_GE(ms, 0.0);
  EXPECT_LT(ms, 5000.0);
  auto untimed = d->record_event(false);
  EXPECT_THROW(start->elapsed_ms(*untimed), std::runtime_error);
  EXPECT_THROW(start->elapsed_ms(*cpu_device().record_event()), std::runtime_error);
}

TEST(DeviceEvents, AnAllocationPastTheMachinesMemoryIsAnOutOfMemoryErrorNamingTheDevice) {
  Device& d = cpu_device();
  void* kept = d.allocator().alloc(4096);
  try {
    d.allocator().alloc(size_t{1} << 62);
    FAIL() << "no error";
  } catch (const OutOfMemoryError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("out of memory allocating 4611686018427387904 bytes on CPU (clang)"), std::string::npos)
        << what;
  }
  static_cast<char*>(kept)[4095] = 1; // the other blocks stay
  d.allocator().free(kept, 4096);
}
