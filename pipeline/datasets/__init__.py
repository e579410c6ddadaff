"""Data sets that ship inside the package: Adult (census income) and California housing."""
