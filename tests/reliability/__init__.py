"""Reliability tests: crashes, full and read-only disks, misbehaving plugins, hostile input."""
