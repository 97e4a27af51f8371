//===- TorchOpTest.cpp - kiln::attention's C kernel against a fake PyTorch ===//
//
// kiln-c/Torch.h looks PyTorch's C shim up with dlsym; this binary exports a
// stand-in shim (tensors are FakeTensor handles, the dispatcher a function
// that plays the checked Python launch), and libkilnrt launches through the
// stand-in driver. Checked: an unplanned call goes to the checked operator
// with its stack unchanged and files the plan under its signature; a planned
// call launches without it, with the output PyTorch's allocator made and
// every argument handle freed; another signature, a caller's workspace or a
// checked launch's failure each behave as documented.
//
//===----------------------------------------------------------------------===//

#include "FakeCudaDriver.h"
#include "PackageFixture.h"

#include "kiln-c/Torch.h"

#include <dlfcn.h>

#include <cstring>
#include <functional>
#include <set>
#include <stdexcept>

using namespace kiln::test;
using ::testing::HasSubstr;

namespace {

using StableIValue = uint64_t;
using BoxedKernel = void (*)(StableIValue *, uint64_t, uint64_t);

struct FakeTensor {
  std::vector<int64_t> sizes, strides;
  int32_t dtype = 15; // BFloat16's ScalarType
  int32_t deviceType = 1, deviceIndex = 0;
  uintptr_t data = 0;
};

std::set<FakeTensor *> live;
uintptr_t nextAddress = 0x100000;
BoxedKernel registeredKernel = nullptr;
std::string registeredName, registeredKey;
/// What the stand-in dispatcher does with a call: the checked launch.
std::function<int32_t(const char *, StableIValue *)> dispatcher;

FakeTensor *newTensor(std::vector<int64_t> sizes, std::vector<int64_t> strides,
                      int32_t dtype = 15) {
  auto *tensor = new FakeTensor{std::move(sizes), std::move(strides), dtype};
  tensor->data = nextAddress;
  nextAddress += 0x100000;
  live.insert(tensor);
  return tensor;
}

FakeTensor *asTensor(StableIValue value) {
  return reinterpret_cast<FakeTensor *>(value);
}

} // namespace

// The stand-in shim, found by dlsym in this executable (ENABLE_EXPORTS).
extern "C" {
#define SHIM __attribute__((visibility("default")))
SHIM int32_t aoti_torch_library_init_impl(const char *, const char *key,
                                          const char *, uint32_t, void **ret) {
  registeredKey = key;
  static int library;
  *ret = &library;
  return 0;
}
SHIM int32_t aoti_torch_library_impl(void *, const char *name, BoxedKernel fn) {
  registeredName = name;
  registeredKernel = fn;
  return 0;
}
SHIM int32_t aoti_torch_call_dispatcher(const char *op, const char *,
                                        StableIValue *stack) {
  return dispatcher(op, stack);
}
SHIM int32_t aoti_torch_get_data_ptr(FakeTensor *t, void **ret) {
  *ret = reinterpret_cast<void *>(t->data);
  return 0;
}
SHIM int32_t aoti_torch_get_dim(FakeTensor *t, int64_t *ret) {
  *ret = static_cast<int64_t>(t->sizes.size());
  return 0;
}
SHIM int32_t aoti_torch_get_sizes(FakeTensor *t, int64_t **ret) {
  *ret = t->sizes.data();
  return 0;
}
SHIM int32_t aoti_torch_get_strides(FakeTensor *t, int64_t **ret) {
  *ret = t->strides.data();
  return 0;
}
SHIM int32_t aoti_torch_get_dtype(FakeTensor *t, int32_t *ret) {
  *ret = t->dtype;
  return 0;
}
SHIM int32_t aoti_torch_get_device_type(FakeTensor *t, int32_t *ret) {
  *ret = t->deviceType;
  return 0;
}
SHIM int32_t aoti_torch_get_device_index(FakeTensor *t, int32_t *ret) {
  *ret = t->deviceIndex;
  return 0;
}
SHIM int32_t aoti_torch_empty_strided(int64_t rank, const int64_t *sizes,
                                      const int64_t *strides, int32_t dtype,
                                      int32_t deviceType, int32_t deviceIndex,
                                      FakeTensor **ret) {
  *ret = newTensor({sizes, sizes + rank}, {strides, strides + rank}, dtype);
  (*ret)->deviceType = deviceType;
  (*ret)->deviceIndex = deviceIndex;
  return 0;
}
SHIM int32_t aoti_torch_delete_tensor_object(FakeTensor *t) {
  EXPECT_EQ(live.erase(t), 1u) << "a handle freed twice or never made";
  delete t;
  return 0;
}
SHIM int32_t aoti_torch_get_current_cuda_stream(int32_t, void **ret) {
  *ret = reinterpret_cast<void *>(0x5eed);
  return 0;
}
SHIM int32_t aoti_torch_dtype_uint8() { return 0; }
SHIM int32_t aoti_torch_device_type_cuda() { return 1; }
#undef SHIM
}

namespace {

FakeCudaState &fake() {
  static FakeCudaState *state = [] {
    void *library = ::dlopen(std::getenv("KILN_CUDA_DRIVER_LIB"), RTLD_NOW);
    EXPECT_NE(library, nullptr) << ::dlerror();
    return reinterpret_cast<FakeCudaState *(*)()>(
        ::dlsym(library, "fakeCudaState"))();
  }();
  return *state;
}

/// A boxed optional: 0, or a heap StableIValue holding the tensor.
StableIValue boxed(FakeTensor *tensor) {
  return tensor ? reinterpret_cast<StableIValue>(
                      new StableIValue(reinterpret_cast<StableIValue>(tensor)))
                : 0;
}

/// Consumes a stack as PyTorch's conversion to IValues does.
void consume(StableIValue *stack) {
  for (int slot : {0, 1, 2})
    aoti_torch_delete_tensor_object(asTensor(stack[slot]));
  for (int slot : {3, 4, 5, 8})
    if (stack[slot]) {
      auto *box = reinterpret_cast<StableIValue *>(stack[slot]);
      aoti_torch_delete_tensor_object(asTensor(*box));
      delete box;
    }
}

class TorchOpTest : public PackageTest {
protected:
  void SetUp() override {
    PackageTest::SetUp();
    fake() = FakeCudaState();
    ASSERT_EQ(kiln_torch_register_attention(nullptr, nullptr,
                                            "kiln::attention_checked"),
              KILN_OK)
        << kiln_last_error();
    ASSERT_NE(registeredKernel, nullptr);
    json manifest = validManifest();
    writePackage(manifest);
    for (const json &target : manifest["targets"]) {  // PTX naming its kernels
      std::string text = "// " + target["chip"].get<std::string>() + "\n";
      for (const json &kernel : manifest["kernels"])
        text += ".entry " + kernel["name"].get<std::string>() + "\n";
      writeFile(target["ptx"].get<std::string>(), text);
    }
    ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_package_find_site(package, "attention_0", &site), KILN_OK);
    checkedCalls = 0;
    filed = true;
    // The checked launch: binds the site, files the plan (as the Python
    // launch does with the arguments its checks built), returns an output.
    dispatcher = [this](const char *op, StableIValue *stack) -> int32_t {
      ++checkedCalls;
      lastChecked = op;
      kiln_torch_bind_site(handle, site);
      if (failWith) {
        consume(stack);
        kiln_torch_set_error(failWith);
        return 1;
      }
      kiln_attention_args a;
      kiln_attention_args_init(&a);
      a.q_dtype = a.k_dtype = a.v_dtype = a.out_dtype = KILN_DTYPE_BF16;
      a.batch = 2;
      a.q_heads = 8;
      a.kv_heads = 2;
      a.q_len = a.kv_len = 16;
      a.head_dim = 64;
      EXPECT_EQ(kiln_attention_args_set_contiguous(site, &a), KILN_OK);
      int64_t sizes[4] = {2, 8, 16, 64};
      EXPECT_EQ(kiln_torch_add_plan(handle, &a, 4, sizes, 0), KILN_OK);
      consume(stack);
      int64_t strides[4] = {8192, 1024, 64, 1};
      FakeTensor *out = nullptr;
      aoti_torch_empty_strided(4, sizes, strides, 15, 1, 0, &out);
      stack[0] = reinterpret_cast<StableIValue>(out);
      return 0;
    };
  }

  void TearDown() override {
    for (FakeTensor *tensor : live)
      delete tensor;
    live.clear();
    PackageTest::TearDown();
  }

  /// Calls the kernel as the dispatcher would; returns the output.
  FakeTensor *call(std::vector<int64_t> qStrides = {8192, 1024, 64, 1},
                   FakeTensor *workspace = nullptr, int32_t device = 0) {
    FakeTensor *q = newTensor({2, 8, 16, 64}, qStrides);
    FakeTensor *k = newTensor({2, 2, 16, 64}, {2048, 1024, 64, 1});
    FakeTensor *v = newTensor({2, 2, 16, 64}, {2048, 1024, 64, 1});
    q->deviceIndex = k->deviceIndex = v->deviceIndex = device;
    StableIValue stack[9] = {
        reinterpret_cast<StableIValue>(q),
        reinterpret_cast<StableIValue>(k),
        reinterpret_cast<StableIValue>(v),
        0,
        0,
        boxed(workspace),
        static_cast<StableIValue>(handle),
        0,
        0};
    registeredKernel(stack, 9, 1);
    return asTensor(stack[0]);
  }

  const kiln_site *site = nullptr;
  int64_t handle = 0;
  int checkedCalls = 0;
  bool filed = true;
  const char *failWith = nullptr;
  std::string lastChecked;
};

TEST_F(TorchOpTest, RegistersForCuda) {
  EXPECT_EQ(registeredName, "attention");
  EXPECT_EQ(registeredKey, "CUDA");
}

TEST_F(TorchOpTest, FirstCallIsCheckedThenPlannedCallsLaunchInC) {
  handle = 3;
  int64_t planned0, checked0;
  kiln_torch_counts(&planned0, &checked0);
  FakeTensor *first = call();
  EXPECT_EQ(checkedCalls, 1);
  EXPECT_EQ(lastChecked, "kiln::attention_checked");
  EXPECT_EQ(fake().launches, 0); // the stand-in checked launch launches none
  EXPECT_EQ(live.size(), 1u) << "every argument handle freed";
  EXPECT_TRUE(live.count(first));

  FakeTensor *second = call();
  EXPECT_EQ(checkedCalls, 1) << "a planned call runs no checked launch";
  EXPECT_EQ(fake().launches, 1);
  EXPECT_EQ(fake().lastLaunch.stream, reinterpret_cast<CUstream>(0x5eed));
  EXPECT_EQ(second->sizes, (std::vector<int64_t>{2, 8, 16, 64}));
  EXPECT_EQ(second->strides, (std::vector<int64_t>{8192, 1024, 64, 1}));
  EXPECT_EQ(second->dtype, 15);
  EXPECT_EQ(live.size(), 2u) << "only the two outputs are alive";
  int64_t planned, checked;
  kiln_torch_counts(&planned, &checked);
  EXPECT_EQ(planned - planned0, 1);
  EXPECT_EQ(checked - checked0, 1);
}

TEST_F(TorchOpTest, AnotherSignatureIsCheckedAgain) {
  handle = 4;
  call();
  call();
  EXPECT_EQ(checkedCalls, 1);
  call({8192, 64, 512, 1}); // q as a transposed view: not the plan's
  EXPECT_EQ(checkedCalls, 2);
}

TEST_F(TorchOpTest, CallersWorkspaceIsNeverPlanned) {
  handle = 5;
  for (int i = 0; i < 2; ++i)
    call({8192, 1024, 64, 1}, newTensor({4096}, {1}, 0));
  EXPECT_EQ(checkedCalls, 2);
  EXPECT_EQ(fake().launches, 0);
  EXPECT_EQ(live.size(), 2u);
}

TEST_F(TorchOpTest, AnotherCurrentDeviceIsChecked) {
  // The stand-in driver's current context is on device 0: a planned call
  // on device 1 goes to the checked launch (which switches device), and
  // files nothing more.
  handle = 8;
  call({8192, 1024, 64, 1}, nullptr, 1);
  call({8192, 1024, 64, 1}, nullptr, 1);
  EXPECT_EQ(checkedCalls, 2);
  EXPECT_EQ(fake().launches, 0);
  call();  // device 0: planned on its first call, launched on its second
  call();
  EXPECT_EQ(checkedCalls, 3);
  EXPECT_EQ(fake().launches, 1);
  EXPECT_EQ(live.size(), 4u);
}

TEST_F(TorchOpTest, CheckedFailureRaisesItsMessage) {
  handle = 6;
  failWith = "KilnError: q has 7 heads; the site takes 8";
  try {
    call();
    FAIL() << "no error raised";
  } catch (const std::runtime_error &error) {
    EXPECT_THAT(error.what(), HasSubstr("q has 7 heads"));
  }
  EXPECT_TRUE(live.empty());
}

TEST_F(TorchOpTest, PlanOutsideAHandedCallIsIgnored) {
  handle = 7;
  kiln_torch_bind_site(handle, site);
  kiln_attention_args a;
  kiln_attention_args_init(&a);
  int64_t sizes[4] = {2, 8, 16, 64};
  EXPECT_EQ(kiln_torch_add_plan(handle, &a, 4, sizes, 0), KILN_OK);
  call();
  EXPECT_EQ(checkedCalls, 1);
}

} // namespace
