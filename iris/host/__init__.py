"""Host side: context, heap, memory backends, process-group plumbing, launcher."""
