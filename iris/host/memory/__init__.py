"""The symmetric heap and what lives on it: the backing memory (one allocation per rank, mapped by every peer),
the offset allocator, the growable VMM heap, the library's workspaces, and PyTorch-style tensor factories."""
