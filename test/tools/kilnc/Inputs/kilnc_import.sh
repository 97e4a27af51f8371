#!/bin/sh
# Adapts kilnc to check_truncated.py's `TOOL --import-onnx FILE -o OUT` calls:
# import the model and print its fusion report.
exec "${KILNC:?KILNC must name the kilnc binary}" "$2" --report
