"""The graphs the torch.compile backend exported in this process, kept
for study and for tests: each graph's kilnc report, the FX code its names
refer to, and its ONNX with the weights turned into graph inputs (the
structure, masks and constants at a size a test can hold). The backend
writes them to its cache directory when KILN_KEEP_GRAPHS=1.
"""

from pathlib import Path


def strip_weights(source: Path, target: Path, largest: int = 4096) -> None:
    """`source` with every float initializer of more than `largest`
    elements turned into a graph input: the graph's structure (masks,
    constants, shapes) at a size a test can hold."""
    import onnx

    model = onnx.load(str(source))
    graph = model.graph
    kept = []
    for tensor in graph.initializer:
        count = 1
        for dim in tensor.dims:
            count *= dim
        if count > largest and tensor.data_type in (1, 10, 11, 16):
            graph.input.append(onnx.helper.make_tensor_value_info(
                tensor.name, tensor.data_type, list(tensor.dims)))
        else:
            kept.append(tensor)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    onnx.save(model, str(target))


def keep_graphs(directory: Path, name: str) -> None:
    """The reports, FX code and structure-only ONNX of the graphs this
    process exported, copied to `directory` under `name`."""
    import shutil

    from kiln import site_cache

    directory.mkdir(parents=True, exist_ok=True)
    graphs = site_cache.cache_directory() / "graphs"
    for path in sorted(graphs.glob("*")):
        if path.name.startswith(".") or any(directory.glob(f"*.{path.name}")):
            continue  # being written, or kept for an earlier model
        if path.suffix == ".onnx":
            strip_weights(path, directory / f"{name}.{path.name}")
        else:
            shutil.copy(path, directory / f"{name}.{path.name}")
