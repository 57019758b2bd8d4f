"""The data: the official archive fetched and checked (download), its binary records turned
into cached tensors (prepare), those tensors read back with their checks (prepared), the
other data sets (datasets) and synthetic archives in the official layout (synthetic)."""
