//===- LaunchTestMain.cpp - Entry point of the fake-driver launch tests ---===//
//
// Points libkilnrt at the stand-in driver built next to this binary before
// anything loads a driver.
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#ifndef KILN_FAKE_CUDA_DRIVER
#error "KILN_FAKE_CUDA_DRIVER must name the stand-in driver library"
#endif

int main(int argc, char **argv) {
  ::setenv("KILN_CUDA_DRIVER_LIB", KILN_FAKE_CUDA_DRIVER, 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
