"""veriloop: train and evaluate reasoning language models with verifiable rewards."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("veriloop")  # pyproject.toml's, as installed (`veriloop --version` says it)
except PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

del PackageNotFoundError, version
