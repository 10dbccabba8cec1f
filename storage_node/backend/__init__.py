"""Layer 1: bytes in and out of local files and object stores."""
