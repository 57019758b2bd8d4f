"""Speed: the benchmark and its roofline, the TensorFlow baseline, the GPU run and its
plan and table."""
