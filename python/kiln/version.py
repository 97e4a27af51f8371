"""The package's version, in a module of its own that imports nothing, so
that any module of the package may read it without importing the package
(which imports its modules)."""

__version__ = "0.1.0"
