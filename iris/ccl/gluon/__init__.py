"""Gluon kernels of the collectives that have one (``Config(use_gluon=True)``): all_gather and all_to_all."""
