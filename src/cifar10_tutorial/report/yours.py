"""The report's sections for variants of no exercise ("Your variants"): one section each,
for any variant whose name none of the tutorial's sections uses (:data:`.results.
TUTORIAL_VARIANTS`), with no code change: what it changes (its overrides of the
baseline), its result beside the baseline's weighed against the seed spread, and its
curves beside the baseline's."""
from __future__ import annotations

from typing import Optional

import pandas as pd

from ..files import write_text_atomic

from .results import Results, load_curve, load_provenance, markdown_table, marker, pct, plot


def flat(overrides: dict, prefix: str = "") -> dict:
    """``{"model": {"dropout": 0.5}}`` as ``{"model.dropout": 0.5}``."""
    out = {}
    for key, value in overrides.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _as_written(value) -> str:
    """A param's value as the params file writes it: null, true, false, .inf; a string
    quoted where YAML (1.2, as DVC reads the file) would read it as another value (an md5
    of digits, 'null', '')."""
    import json
    import math

    from ..param_types import load_yaml12

    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_as_written(v) for v in value) + "]"
    if isinstance(value, str):
        try:
            plain = bool(value) and load_yaml12(value) == value and value == value.strip()
        except Exception:  # noqa: BLE001 (YAML's own errors: text it cannot read plain)
            plain = False
        return value if plain else json.dumps(value)
    return str(value)


def your_variants(r: Results, every: pd.DataFrame, dataset_variants) -> list[str]:
    """A section per variant of ``r.yours`` and per data-set variant of ``dataset_variants``
    (a mapping name -> overrides, or names) with results in ``every``; nothing when there
    is none."""
    overrides = dict(r.overrides or {})
    if isinstance(dataset_variants, dict):
        overrides.update(dataset_variants)
    names = list(r.yours.index) if r.yours is not None else []
    names += [n for n in dataset_variants if n in every.index and n not in names]
    if not names:
        return []
    md = ["## Your variants", "",
          "Variants that none of the tutorial's sections compares, each against the "
          "baseline under its own budget.", ""]
    for name in names:
        md += _section(r, name, every.loc[name], flat(overrides.get(name) or {}),
                       name in dataset_variants)
    return md


# a variant's budget: said beside its results (the baseline's is ablation.max_steps)
BUDGET = ("train.max_steps", "train.max_epochs")


def _repeats(changes: dict, baseline: Optional[dict]) -> set[str]:
    """The keys of ``changes`` whose value is the baseline's own (``baseline``: its
    sections): an override that changes nothing. A boolean never equals a number."""
    def plain(v):
        return list(v) if isinstance(v, tuple) else v

    base = flat(baseline or {})
    return {k for k, v in changes.items() if k in base and k not in BUDGET
            and isinstance(v, bool) == isinstance(base[k], bool) and plain(v) == plain(base[k])}


def _same_data_as_the_baseline(r: Results, name: str) -> str:
    """The data hash both runs recorded where a data-set variant trained on the baseline's
    own data (its data section names the same images another way); else ''."""
    theirs, ours = (load_provenance(r.root, n) for n in (name, "baseline"))
    if theirs is None or ours is None or theirs["data_hash"] != ours["data_hash"]:
        return ""
    return str(theirs["data_hash"])


def _section(r: Results, name: str, v: pd.Series, changes: dict,
             dataset: bool = False) -> list[str]:
    base = r.base
    repeated = _repeats(changes, r.baseline_values)
    listed = {k: f"`{k}: {_as_written(val)}`" for k, val in changes.items() if k not in repeated}
    same = _same_data_as_the_baseline(r, name) if dataset and base is not None else ""
    if same:  # what differs is the rest: the data are the baseline's own
        data = ", ".join(t for k, t in listed.items() if k.split(".")[0] == "data")
        rest = ", ".join(t for k, t in listed.items() if k.split(".")[0] != "data")
        names = (f"its data section ({data or 'the defaults'}) names the baseline's own "
                 f"data: both runs recorded the data hash {same[:12]}")
        what = (f"{rest}, and nothing else: {names}" if rest else f"nothing: {names}")
    else:
        what = ", ".join(listed.values()) or "nothing (the baseline's settings)"
    rows = ([("baseline", base)] if base is not None else []) + [(name, v)]
    t = pd.DataFrame({"variant": [n for n, _ in rows],
                      "steps": [f"{int(x['steps']):,}" for _, x in rows],
                      "precision @ 1 (averaged)": [pct(x["precision_at_1"]) for _, x in rows],
                      "precision @ 1 (raw)": [pct(x["precision_at_1_raw"]) for _, x in rows],
                      "final loss (avg)": [f"{x['final_loss_avg']:.3f}" for _, x in rows],
                      "train examples/sec": [f"{x['examples_per_sec']:,.0f}" for _, x in rows]})
    write_text_atomic(r.tables / f"variant_{name}.csv", t.to_csv(index=False))
    sentence = f"It changes {what}."
    if repeated:
        said = ", ".join(f"`{k}: {_as_written(changes[k])}`" for k in changes if k in repeated)
        one = len(repeated) == 1
        tail = f"{said} {'is' if one else 'are'} the baseline's own value{'' if one else 's'}"
        sentence = (f"It changes nothing: {tail}." if not listed else
                    f"It changes {what}; {tail}, so {'it changes' if one else 'they change'} "
                    f"nothing.")
    md = [f"### `{name}`", "", sentence, "", markdown_table(t), ""]
    if base is not None:
        d = 100 * (v["precision_at_1"] - base.precision_at_1)
        budget = ("" if int(v["steps"]) == int(base.steps) else
                  f" (after {int(v['steps']):,} steps, the baseline after {int(base.steps):,}: "
                  f"the budgets differ)")
        md += [r.answer(f"precision @ 1 (averaged weights) moves by {d:+.2f} points against "
                        f"the baseline{budget} {r.noise(d, 'precision_at_1')}."), ""]
    png = f"variant_{name}.png"

    def draw(ax):
        for label, series in (("baseline", "baseline"), (name, name)):
            curve = load_curve(r.root, series)
            if curve is not None and (series == name or base is not None):
                ax.plot(curve["step"], curve["loss_avg"], label=label, lw=1.2,
                        marker=marker(len(curve)), ms=3)
    if plot(r.plots / png, (7, 4), draw, f"Training loss: {name} and the baseline", "step",
            "total loss (moving average, decay 0.9)", legend=True):
        md += [f"![{name}](plots/{png})", ""]
    return md
