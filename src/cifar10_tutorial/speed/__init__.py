"""Speed (the GPU run, which measures the project on a GPU, is in benchmarks/, outside the
package):

- ``benchmark``: the throughput benchmark (stages/benchmark.py), with its parts:
  ``steps`` (timed windows of train steps), ``baselines`` (typical PyTorch pipelines),
  ``tf_baseline`` (TensorFlow, in a process of its own), ``compiled`` (torch.compile
  against eager), ``stage`` (the train stage against its fixed-batch step), ``roofline``
  (the machine's peak) and ``roofline_table`` (its words and tables);
- ``trial``: the exercise trial's wall time (``cifar10 trial``), in a throwaway clone.
"""
