"""The CPU throughput benchmark's parts (benchmarks/benchmark.py, `cifar10 benchmark`):

- ``benchmark``: the pipelines timed one after another, and the printed table;
- ``steps``: timed windows of train steps;
- ``baselines``: typical PyTorch pipelines, and TensorFlow's run;
- ``tf_baseline``: TensorFlow (Keras + tf.data), in a process of its own;
- ``compiled``: torch.compile against eager;
- ``stage``: the train stage against its fixed-batch step;
- ``roofline``: the machine's peak; ``roofline_table``: its words and tables.
"""
