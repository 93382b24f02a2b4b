"""One rank's CPU side: the steps of making a context (``bootstrap.py``), process groups, topology, group flags, the
watchdog, remembered launches, the launcher, timing and tracing; ``memory/`` the heap and what lives on it,
``copy_engine/`` the copy engines."""
