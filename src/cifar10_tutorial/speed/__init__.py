"""Speed:

- ``benchmark``: the throughput benchmark (stages/benchmark.py), with its parts:
  ``steps`` (timed windows of train steps), ``baselines`` (typical PyTorch pipelines),
  ``tf_baseline`` (TensorFlow, in a process of its own), ``compiled`` (torch.compile
  against eager), ``stage`` (the train stage against its fixed-batch step), ``roofline``
  (the machine's peak) and ``roofline_table`` (its words and tables);
- ``gpu_run``: the GPU run, with ``gpu_parts`` (its parts), ``gpu_multi`` (every visible
  device), ``gpu_plan`` (sizes fitted to a time budget) and ``gpu_table`` (its printed table);
- ``trial``: the exercise trial's wall time (``cifar10 trial``), in a throwaway clone.
"""
