"""The reference's published figures that the report quotes, in one table, with where
each comes from (docs/reference.md says the same in prose)."""
from __future__ import annotations

import pandas as pd

from .results import markdown_table

# figure name -> (the figure, where it comes from); batch 128 per GPU
REFERENCE = {
    "precision": ("~86% at 100K steps (K40), 83.0% in cifar10_eval.py's docstring",
                  "the tutorial's results table; cifar10_eval.py's docstring"),
    "precision_target": (86, "the tutorial's ~86% (the line in the held-out plots)"),
    "precision_eval_docstring": (83.0, "cifar10_eval.py's docstring: precision @ 1 = 0.830 "
                                 "(the dashed line in the reproduction plot)"),
    "budget": ("about 86% after 100K steps of batch 128 (256 epochs)",
               "the tutorial's results table (1 Tesla K40m, 4 hours)"),
    "summary_row": (["reference (1 K40, 100K steps, official test set)", "~86%", "", "",
                     "390-600", "minutes", "1,068,298"],
                    "the tutorial's sample log on a Tesla K40c (390-600 examples/sec), its "
                    "parameter count, and its note that the first step takes minutes"),
    "averaging": ("about +3 points", "the tutorial's exercise: evaluating without the "
                  "moving averages costs about 3 points"),
    "averaging_row": (["reference (100K steps)", "~86%", "", "about +3"],
                      "the results table and the averaging exercise"),
    "devices": ("1 K20m: 0.35-0.60 s/batch; 2 K20m: 0.13-0.20 s/batch (128 per GPU)",
                "the tutorial's results table (cifar10_multi_gpu_train.py)"),
    "devices_rows": ([["reference: 1 K20m x 128", "213-366", "213-366", "0.35-0.60",
                       "~86% at 60K steps"],
                      ["reference: 2 K20m x 128", "640-985", "320-492", "0.13-0.20",
                       "~84% at 30K steps"]],
                     "the results table; cifar10_multi_gpu_train.py prints sec/batch = step "
                     "time / number of GPUs, so a step of 2 x 128 examples takes 2 x 0.13-0.20 "
                     "s: examples/sec = 128 / (sec/batch) in total, half that per GPU"),
    "local_head": ("cuda-convnet's 11% error needed 10-view test-time augmentation and a much "
                   "longer schedule", "cuda-convnet's layers-conv-local-11pct configuration"),
    "queue_fill": ("the reference's 20,000 images took minutes with 16 Python threads",
                   "the tutorial: 0.4 x 50,000 examples queued before the first step"),
}


def ref(key: str):
    return REFERENCE[key][0]


def _flat(value) -> str:
    if isinstance(value, list):
        return "; ".join(_flat(v) for v in value if v != "")
    return str(value)


# what each figure is, as the report's table names it (the keys are the code's)
LABELS = {
    "precision": "precision @ 1", "precision_target": "the tutorial's precision, in the plots",
    "precision_eval_docstring": "precision @ 1 in cifar10_eval.py", "budget": "the budget",
    "summary_row": "the summary table's reference row", "averaging": "the moving averages' gain",
    "averaging_row": "exercise 4's reference row", "devices": "seconds per batch on 1 and 2 GPUs",
    "devices_rows": "exercise 5's reference rows", "local_head": "cuda-convnet's local head",
    "queue_fill": "the queue's fill",
}


def reference_markdown() -> list[str]:
    rows = [(LABELS.get(key, key.replace("_", " ")), _flat(value), source)
            for key, (value, source) in REFERENCE.items()]
    t = pd.DataFrame(rows, columns=["figure", "value", "where it comes from"])
    return ["## The reference's figures used above", "", markdown_table(t), ""]
