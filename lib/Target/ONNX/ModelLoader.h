//===- ModelLoader.h - Parse and shape-infer an ONNX model ------*- C++ -*-===//
//
// The only part of the importer that calls into libonnx/protobuf code that
// may throw; it is built with exceptions enabled and never lets one escape.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_TARGET_ONNX_MODELLOADER_H
#define KILN_LIB_TARGET_ONNX_MODELLOADER_H

#include "onnx/onnx_pb.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace mlir::kiln::onnx_import {

struct LoadedModel {
  onnx::ModelProto model;
  /// The graph with ONNX's own shape inference applied (empty when it did
  /// not run); used only for the result types of nodes kept opaque.
  onnx::GraphProto inferred;
  bool inferenceRan = false;
};

/// Parses `bytes` as a ModelProto. Returns false with `message` set when
/// `bytes` is not a well-formed model.
bool loadModel(llvm::StringRef bytes, LoadedModel &loaded,
               std::string &message);

/// Runs ONNX's checker and shape inference once (opsets libonnx knows, and
/// only on models its checker accepts), filling `loaded.inferred`.
void inferShapes(LoadedModel &loaded);

} // namespace mlir::kiln::onnx_import

#endif // KILN_LIB_TARGET_ONNX_MODELLOADER_H
