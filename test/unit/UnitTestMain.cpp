//===- UnitTestMain.cpp - Entry point of the runtime unit tests -----------===//
//
// The unit tests never use a GPU. Unless KILN_UNIT_TEST_REAL_DRIVER is set,
// the runtime is pointed at a driver library that does not exist, so that the
// "no driver" behaviour is tested the same way on machines with and without
// one.
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char **argv) {
  if (!std::getenv("KILN_UNIT_TEST_REAL_DRIVER"))
    ::setenv("KILN_CUDA_DRIVER_LIB", "/nonexistent/kiln-unit/libcuda.so.1", 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
