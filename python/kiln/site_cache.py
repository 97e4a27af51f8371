"""The on-disk cache of one-site packages that the frontends compile.

A site (`kiln.site.SiteSpec`) is compiled on first use into a package under
``$KILN_CACHE/<kiln version>/<label>_<digest>`` (default ``~/.cache/kiln``;
the digest is of the package's MLIR source and its targets), so later
processes load it without ``kilnc``. It is compiled for the GPU of this
machine only (`compile_targets`: sm_90a on Hopper, sm_80 PTX elsewhere; both
where no GPU is seen, or as ``$KILN_TARGETS`` says), which takes about a
third less time than both. Each package records the ``kilnc`` that built it; where
another one is at hand, the site is compiled again. Safe from several
threads and several processes sharing one cache directory.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Dict, Optional, Tuple

from .version import __version__
from .compiler import compile as kiln_compile
from .compiler import find_kilnc
from .capi import cuda_driver
from .runtime import KilnError, Package, Site
from .site import SiteSpec, package_source, training_source

__all__ = ["cache_directory", "compile_targets", "package_from_source",
           "site_for", "site_from_source", "training_sites_for"]

_lock = threading.Lock()
#: Sites by their spec (site_for).
_sites: Dict[SiteSpec, Site] = {}
#: Packages by their directory (site_from_source, package_from_source).
_packages_by_digest: Dict[str, Package] = {}
#: Training sites (forward, backward) by their spec (training_sites_for).
_training_sites: Dict[SiteSpec, Tuple[Site, Site]] = {}


def cache_directory() -> Path:
    return Path(os.environ.get("KILN_CACHE",
                               Path.home() / ".cache" / "kiln")) / __version__


_STAMP_FILE = "kilnc.stamp"
_BOTH_TARGETS = "sm_90a,sm_80"
_targets: Optional[str] = None


def _device_capability() -> Optional[tuple]:
    """Compute capability of CUDA device 0 through the driver, or None."""
    import ctypes

    cuda = cuda_driver()
    if cuda is None:
        return None
    device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if cuda.cuDeviceGet(ctypes.byref(device), 0) != 0:
        return None
    # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR
    if (cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device) != 0 or
            cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device) != 0):
        return None
    return major.value, minor.value


def compile_targets() -> str:
    """The targets site packages are compiled for: ``$KILN_TARGETS``, else
    this machine's GPU's (sm_90a on compute capability 9.0, sm_80 on any
    other of 8.0 or later, whose driver compiles sm_80 PTX for it), else both
    sm_90a and sm_80."""
    global _targets
    if _targets is None:
        chosen = os.environ.get("KILN_TARGETS")
        if not chosen:
            capability = _device_capability()
            if capability == (9, 0):
                chosen = "sm_90a"
            elif capability is not None and capability >= (8, 0):
                chosen = "sm_80"
            else:
                chosen = _BOTH_TARGETS
        _targets = chosen
    return _targets


def _compiler_stamp() -> Optional[str]:
    """Identity of the kilnc this process would compile with (its path,
    size and modification time), or None when there is none: a cached
    package built by another kilnc is rebuilt when one is at hand."""
    try:
        path = os.path.realpath(find_kilnc())
        status = os.stat(path)
    except (KilnError, OSError):
        return None
    return f"{path} {status.st_size} {status.st_mtime_ns}"


def _is_current(directory: Path, stamp: Optional[str]) -> bool:
    """Whether `directory` holds a whole package that this process may use:
    one built by the kilnc at hand (any, when there is none)."""
    stamp_file = directory / _STAMP_FILE
    try:
        return (directory / "manifest.json").exists() and (
            stamp is None or stamp_file.read_text() == stamp)
    except OSError:
        return False


def _compile_into_cache(text: str, directory: Path,
                        stamp: Optional[str], targets: str = _BOTH_TARGETS) -> None:
    """Compiles `text` into `directory` so that other processes never see
    half a package: one process at a time compiles a given site (an
    exclusive lock on a file beside it; the others wait, then find it
    built), into a private directory that is renamed into place whole."""
    import fcntl
    import shutil
    import tempfile

    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f"{directory.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if _is_current(directory, stamp):
                return
            scratch = Path(tempfile.mkdtemp(prefix=f".{directory.name}.",
                                            dir=directory.parent))
            try:
                source = scratch / "site.mlir"
                source.write_text(text)
                built = scratch / "package"
                kiln_compile(source, output=built, target=targets).close()
                if stamp is not None:
                    (built / _STAMP_FILE).write_text(stamp)
                if directory.exists():
                    # A package another kilnc built: moved aside whole (a
                    # process that opened it keeps its files), then removed.
                    stale = scratch / "stale"
                    os.rename(directory, stale)
                os.rename(built, directory)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def site_for(spec: SiteSpec) -> Site:
    """The site of `spec`: from memory, from the disk cache, or compiled now
    (needs kilnc) into the cache (see site_from_source). A site already in
    memory is found without a lock (so that torch.compile traces through
    this call)."""
    site = _sites.get(spec)
    if site is not None:
        return site
    site = site_from_source(package_source(spec), spec.label)
    _sites[spec] = site
    return site


def training_sites_for(spec: SiteSpec) -> Tuple[Site, Site]:
    """The training sites of `spec` (a dense site): the forward that keeps
    its log-sum-exp and its backward, from one package compiled as
    site_for() compiles (kiln.site.training_source)."""
    sites = _training_sites.get(spec)
    if sites is not None:
        return sites
    package = package_from_source(training_source(spec),
                                  spec.label + "_train")
    by_name = {site.name: site for site in package.sites}
    sites = (by_name["attention_0"], by_name["attention_grad_1"])
    _training_sites[spec] = sites
    return sites


def site_from_source(text: str, label: str) -> Site:
    """The one site of the package compiled from MLIR `text`: from memory,
    from the disk cache (``$KILN_CACHE/<version>/<label>_<digest>``), or
    compiled now into it (needs kilnc). A cached package that another kilnc
    built is compiled again when kilnc is found (without one, the cache is
    used as it is). Safe from several threads and processes sharing one
    cache directory."""
    return package_from_source(text, label).sites[0]


def package_from_source(text: str, label: str) -> Package:
    """The package compiled from MLIR `text`, cached as site_from_source()
    says."""
    targets = compile_targets()
    key = text if targets == _BOTH_TARGETS else f"{text}\n// targets: {targets}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    directory = cache_directory() / f"{label}_{digest}"
    package = _packages_by_digest.get(str(directory))
    if package is not None:
        return package
    with _lock:
        package = _packages_by_digest.get(str(directory))
        if package is not None:
            return package
        stamp = _compiler_stamp()
        if not _is_current(directory, stamp):
            _compile_into_cache(text, directory, stamp, targets)
        package = Package(directory)
        _packages_by_digest[str(directory)] = package
        return package
