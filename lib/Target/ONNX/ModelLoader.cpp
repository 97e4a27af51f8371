//===- ModelLoader.cpp - Parse and shape-infer an ONNX model --------------===//
//
// Built with -fexceptions: ONNX shape inference reports errors by throwing.
//
//===----------------------------------------------------------------------===//

#include "ModelLoader.h"

#include "onnx/checker.h"
#include "onnx/shape_inference/implementation.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/stubs/logging.h>

#include <climits>
#include <exception>

using namespace mlir::kiln::onnx_import;

/// Highest opset the linked libonnx (1.12) has schemas for; beyond it its
/// shape inference would apply older operator definitions.
static constexpr int64_t kMaxInferredOpset = 17;

static void silentLogHandler(google::protobuf::LogLevel, const char *, int,
                             const std::string &) {}

bool mlir::kiln::onnx_import::loadModel(llvm::StringRef bytes,
                                        LoadedModel &loaded,
                                        std::string &message) {
  // Protobuf logs parse problems to stderr; the importer reports its own.
  google::protobuf::SetLogHandler(silentLogHandler);
  if (bytes.empty()) {
    message = "the file is empty";
    return false;
  }
  if (bytes.size() > (size_t)INT_MAX) {
    message = "the file is larger than 2 GiB (external data is not supported)";
    return false;
  }
  google::protobuf::io::CodedInputStream stream(
      reinterpret_cast<const uint8_t *>(bytes.data()), (int)bytes.size());
  stream.SetTotalBytesLimit(INT_MAX);
  if (!loaded.model.ParseFromCodedStream(&stream) ||
      !stream.ConsumedEntireMessage()) {
    message = "not an ONNX model (protobuf parsing failed; truncated or "
              "corrupt file?)";
    return false;
  }
  if (!loaded.model.has_graph() || loaded.model.opset_import_size() == 0) {
    message = "not an ONNX model (no graph or no opset import; truncated "
              "file?)";
    return false;
  }

  return true;
}

void mlir::kiln::onnx_import::inferShapes(LoadedModel &loaded) {
  if (loaded.inferenceRan)
    return;
  loaded.inferenceRan = true;
  int64_t opset = 0;
  for (const auto &id : loaded.model.opset_import())
    if (id.domain().empty() || id.domain() == "ai.onnx")
      opset = id.version();
  if (opset < 1 || opset > kMaxInferredOpset)
    return;
  try {
    // libonnx's shape inference assumes a model that passes its checker.
    onnx::checker::check_model(loaded.model);
    onnx::ModelProto copy = loaded.model;
    onnx::ShapeInferenceOptions options(/*check_type=*/false,
                                        /*strict_mode=*/0,
                                        /*data_prop=*/true);
    onnx::shape_inference::InferShapes(
        copy, onnx::OpSchemaRegistry::Instance(), options);
    loaded.inferred.mutable_value_info()->Swap(
        copy.mutable_graph()->mutable_value_info());
  } catch (const std::exception &) {
    // Shape inference is only a hint; the importer computes its own shapes.
    loaded.inferred.Clear();
  }
}
