"""End-to-end tests: libcni with the real reference plugins in throwaway network namespaces."""
