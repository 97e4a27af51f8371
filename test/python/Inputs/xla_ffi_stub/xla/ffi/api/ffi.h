//===- ffi.h - A stand-in for the XLA FFI API that Kiln's handlers use ----===//
//
// Only the subset kiln/jax/kiln_xla*.cc use (buffers, results, errors, the
// binding builder and the handler-symbol macro), with the same spellings,
// so that test_jax_handlers.py type-checks the handlers on a machine without
// JAX. It is not XLA's API: the handlers are built against the real headers
// (jax.ffi.include_dir()) where JAX is installed.
//
//===----------------------------------------------------------------------===//

#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace xla::ffi {

enum class DataType { INVALID, PRED, F16, BF16, F32 };
enum class ErrorCode { kOk, kInvalidArgument };

class Error {
public:
  Error() = default;
  Error(ErrorCode code, std::string message)
      : code(code), text(std::move(message)) {}
  static Error Success() { return Error(); }
  bool success() const { return code == ErrorCode::kOk; }
  bool failure() const { return !success(); }

private:
  ErrorCode code = ErrorCode::kOk;
  std::string text;
};

struct Dimensions {
  const int64_t *data = nullptr;
  size_t count = 0;
  size_t size() const { return count; }
  int64_t operator[](size_t i) const { return data[i]; }
};

class AnyBuffer {
public:
  Dimensions dimensions() const { return {}; }
  DataType element_type() const { return DataType::F32; }
  void *untyped_data() const { return nullptr; }
  size_t size_bytes() const { return 0; }
};

template <typename T> class Result {
public:
  T *operator->() { return &value; }
  T &operator*() { return value; }

private:
  T value;
};

template <typename T> struct PlatformStream {};

struct Traits {
  static constexpr int kCmdBufferCompatible = 1;
};

struct Binding {
  template <typename T> Binding Ctx() { return *this; }
  template <typename T> Binding Arg() { return *this; }
  template <typename T> Binding Ret() { return *this; }
  template <typename T> Binding Attr(const char *) { return *this; }
};

struct Ffi {
  static Binding Bind() { return {}; }
};

} // namespace xla::ffi

#define XLA_FFI_DEFINE_HANDLER_SYMBOL(name, fn, binding, ...)                  \
  extern "C" void *name() {                                                    \
    (void)(binding);                                                           \
    return reinterpret_cast<void *>(&fn);                                      \
  }
