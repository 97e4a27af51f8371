//===- Runtime.h - Kiln runtime, C++ interface -------------------*- C++ -*-===//
//
// A thin RAII layer over the C API of kiln-c/Runtime.h, header-only so that it
// adds nothing to libkilnrt's ABI. Like the C API it does not throw: failures
// return a Status holding the code and message.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_RUNTIME_H
#define KILN_RUNTIME_RUNTIME_H

#include "kiln-c/Runtime.h"

#include <string>
#include <utility>

namespace kiln {
namespace runtime {

/// The result of a runtime call: a status code and, on failure, its message.
class Status {
public:
  Status() = default;
  /// Captures kiln_last_error() when `code` is a failure.
  explicit Status(kiln_status code)
      : statusCode(code), text(code == KILN_OK ? "" : kiln_last_error()) {}

  bool ok() const { return statusCode == KILN_OK; }
  explicit operator bool() const { return ok(); }
  kiln_status code() const { return statusCode; }
  const std::string &message() const { return text; }

private:
  kiln_status statusCode = KILN_OK;
  std::string text;
};

/// An attention site of an open Package; valid while the package is open.
class Site {
public:
  Site() = default;
  explicit Site(const kiln_site *handle) : handle(handle) {}

  const kiln_site *get() const { return handle; }
  Status info(kiln_site_info &result) const {
    return Status(kiln_site_get_info(handle, &result));
  }
  Status check(const kiln_attention_args &args,
               kiln_launch_config *config = nullptr) const {
    return Status(kiln_site_check_attention(handle, &args, config));
  }
  /// Launches on `stream` (a CUstream) without synchronizing.
  Status launch(const kiln_attention_args &args, void *stream) const {
    return Status(kiln_site_launch_attention(handle, &args, stream));
  }

private:
  const kiln_site *handle = nullptr;
};

/// An open package; closes it on destruction.
class Package {
public:
  Package() = default;
  Package(const Package &) = delete;
  Package &operator=(const Package &) = delete;
  Package(Package &&other) noexcept
      : handle(std::exchange(other.handle, nullptr)) {}
  Package &operator=(Package &&other) noexcept {
    if (this != &other) {
      kiln_package_close(handle);
      handle = std::exchange(other.handle, nullptr);
    }
    return *this;
  }
  ~Package() { kiln_package_close(handle); }

  /// Opens the package directory `directory` into `result`.
  static Status open(const std::string &directory, Package &result) {
    kiln_package *opened = nullptr;
    Status status(kiln_package_open(directory.c_str(), &opened));
    if (status.ok())
      result = Package(opened);
    return status;
  }

  kiln_package *get() const { return handle; }
  int64_t numSites() const { return kiln_package_num_sites(handle); }
  Status site(int64_t index, Site &result) const {
    const kiln_site *found = nullptr;
    Status status(kiln_package_get_site(handle, index, &found));
    result = Site(found);
    return status;
  }
  Status findSite(const std::string &name, Site &result) const {
    const kiln_site *found = nullptr;
    Status status(kiln_package_find_site(handle, name.c_str(), &found));
    result = Site(found);
    return status;
  }
  /// Loads the modules for the current CUDA context (before graph capture).
  Status prepare() { return Status(kiln_package_prepare(handle)); }

private:
  explicit Package(kiln_package *handle) : handle(handle) {}
  kiln_package *handle = nullptr;
};

} // namespace runtime
} // namespace kiln

#endif // KILN_RUNTIME_RUNTIME_H
