"""The package version (one source: the package, its build metadata and every file it writes read it)."""
__version__ = "0.2.0"
