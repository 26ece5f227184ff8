"""libcni: the runtime side of the Container Network Interface (CNI) for Python."""
