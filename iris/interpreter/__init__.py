"""The cpu backend's changes to Triton and Gluon: Triton's interpreter switched on and mended, Gluon in the
interpreter, and the launch log the CPU tier compiles for sm_90."""
