"""Checking params values against the annotations of the sections in :mod:`.params`:
every key against the dataclass fields, every value against its field's type and range,
with an error that names the key (and, for what YAML reads oddly, how to write it).

A number's range is declared beside its field, ``Annotated[int, Range(1, 1024)]``, and
checked here, at load, for every section and every ablation variant alike: a value far
outside what the code can use (a million threads, a timeout of 1e300 seconds) would
otherwise fail late, deep in a library, as a traceback or a hang. Also the regression
gate's tolerances, whose direction is checked against the metric's name."""
from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional, Union

from .errors import PipelineError


class ParamsError(PipelineError):
    """params.yaml has an unknown key, a missing key or a value of the wrong type."""


class RangeError(ParamsError):
    """A number of the right type outside its field's :class:`Range`."""

    def __init__(self, key: str, expected: str, value: Any, why: str):
        self.key, self.expected, self.value, self.why = key, expected, value, why
        super().__init__(self.text())

    def text(self, alternative: str = "") -> str:
        return (f"{self.key}: expected {self.expected}{alternative}, found {self.value!r}"
                f"{f' ({self.why})' if self.why else ''}; set it within that range")


def _number(x: float) -> str:
    """A bound as YAML would take it: 86400, 1000000, 0.5 (not 1e+06)."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


@dataclass(frozen=True)
class Range:
    """The values a number may take: from ``lo`` to ``hi``, each end included unless
    ``lo_open``/``hi_open``; ``why``: what the bound protects, said in the error."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False
    why: str = ""

    def text(self, integer: bool) -> str:
        """The range in words, as the error and docs/params.md say it."""
        if integer:
            return f"an integer from {self.lo} to {self.hi}"
        return (f"a number in {'(' if self.lo_open else '['}{_number(self.lo)}, {_number(self.hi)}"
                f"{')' if self.hi_open else ']'}")

    def check(self, value: Any, key: str) -> None:
        above = value > self.lo if self.lo_open else value >= self.lo
        below = value < self.hi if self.hi_open else value <= self.hi
        if not (above and below):
            raise RangeError(key, self.text(isinstance(value, int)), value, self.why)


def field_range(tp: Any) -> Optional[tuple[Range, bool]]:
    """The :class:`Range` of an annotation (looking inside ``Optional[...]``, ``list[...]``
    and ``dict[..., ...]``) and whether its numbers are integers; None when it has none."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *extras = typing.get_args(tp)
        for extra in extras:
            if isinstance(extra, Range):
                return extra, base is int
        return None
    if origin in (Union, types.UnionType, list, tuple, dict):
        for arg in typing.get_args(tp):
            found = field_range(arg)
            if found is not None:
                return found
    return None


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return type_name(typing.get_args(tp)[0])
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else type_name(a)
                           for a in typing.get_args(tp))
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if origin in (list, tuple):
        return f"a list of {type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _yaml_hint(value: Any) -> str:
    """YAML 1.1 reads ``1e6`` (no dot, no sign in the exponent) as a string: say how to write it."""
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return ""
        mantissa, _, exponent = value.strip().lower().partition("e")
        if not exponent or not math.isfinite(number):
            return ""
        mantissa += "" if "." in mantissa else ".0"
        exponent = exponent if exponent[0] in "+-" else "+" + exponent
        return (f" (YAML reads {value} as text: write {mantissa}e{exponent}, with a dot and "
                f"a signed exponent)")
    return ""


def _convert_union(value: Any, tp: Any, key: str) -> Any:
    """``value`` as the first of the union's types that takes it."""
    args = typing.get_args(tp)
    if value is None and type(None) in args:
        return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _convert(value, arg, key)
        except ParamsError as exc:
            errors.append(exc)
    out_of_range = [e for e in errors if isinstance(e, RangeError)]
    if out_of_range:  # the right type, out of its range: say the range
        raise ParamsError(out_of_range[0].text(" or null" if type(None) in args else ""))
    raise ParamsError(f"{key}: expected {type_name(tp)}, found {value!r}")


def _convert(value: Any, tp: Any, key: str) -> Any:
    """Return ``value`` checked against the annotation ``tp`` (recursing into dataclasses)."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *extras = typing.get_args(tp)
        value = _convert(value, base, key)
        for extra in extras:
            if isinstance(extra, Range):
                extra.check(value, key)
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ParamsError(f"{key}: expected a mapping, found {value!r}")
        return build(tp, value, key)
    if origin in (Union, types.UnionType):
        return _convert_union(value, tp, key)
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ParamsError(f"{key}: expected one of {type_name(tp)}, found {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ParamsError(f"{key}: expected {type_name(tp)}, found {value!r}")
        (item_tp, *_) = typing.get_args(tp)
        items = [_convert(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ParamsError(f"{key}: expected a mapping, found {value!r}")
        _, val_tp = typing.get_args(tp)
        return {k: _convert(v, val_tp, f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ParamsError(f"{key}: expected true or false, found {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParamsError(f"{key}: expected an integer, found {value!r}{_yaml_hint(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ParamsError(f"{key}: expected a number, found {value!r}{_yaml_hint(value)}")
        if not math.isfinite(value):
            raise ParamsError(f"{key}: expected a finite number, found {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ParamsError(f"{key}: expected a string, found {value!r}")
        return value
    raise TypeError(f"param_types.py cannot check the type {tp!r} of {key}")  # a bug here, not user input


# Which way is worse, for the metrics whose meaning is known from their name: a tolerance in
# the other direction gates nothing (a rise of a precision is never a regression), and
# a bare signed number made that slip silent (`eval.precision_at_1: 0.02`, the minus
# forgotten, let a fall from 0.99 to 0.2 pass).
HIGHER_IS_BETTER = "precision"  # precision_at_1, precision_at_1_raw, ..._flip
LOWER_IS_BETTER = "loss"  # loss, loss_avg, loss_raw


def worse_direction(metric: str) -> Optional[str]:
    """``max_drop`` for a metric whose fall is the regression (a precision), ``max_rise``
    for one whose rise is (a loss), None when its name does not say."""
    key = metric.split(".", 1)[-1]
    if HIGHER_IS_BETTER in key:
        return "max_drop"
    if LOWER_IS_BETTER in key:
        return "max_rise"
    return None


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """How far one gated metric may move from its baseline in the direction that is worse:
    exactly one of ``max_drop`` (higher is better) and ``max_rise`` (lower is better), a
    positive number."""

    max_drop: Optional[float] = None
    max_rise: Optional[float] = None

    @property
    def signed(self) -> float:
        """The allowed change as a signed bound: -max_drop (change >= it) or +max_rise."""
        return -self.max_drop if self.max_drop is not None else self.max_rise

    @property
    def direction(self) -> str:
        return "max_drop" if self.max_drop is not None else "max_rise"


def parse_tolerance(metric: Any, value: Any) -> Tolerance:
    """``{max_drop: N}`` or ``{max_rise: N}`` for ``metric``, or one line naming the key,
    what was expected and found, and what to write."""
    key = f"regression.tolerances.{metric}"
    if not (isinstance(metric, str) and re.fullmatch(r"(train|eval)\.[A-Za-z0-9_]+", metric)):
        raise ParamsError(f"{key}: expected a metric named train.<key> or eval.<key> (the "
                          f"train or eval stage's metrics.json), found {metric!r}")
    want = worse_direction(metric)
    why = {"max_drop": "higher is better: a drop is the regression",
           "max_rise": "lower is better: a rise is the regression"}
    expected = (f"{{{want}: N}} ({why[want]})" if want
                else "{max_drop: N} (higher is better) or {max_rise: N} (lower is better)")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        fix = want or ("max_drop" if value < 0 else "max_rise")
        raise ParamsError(f"{key}: expected {expected}, found the bare number {value!r}, "
                          f"whose sign said the direction; write "
                          f"`{metric}: {{{fix}: {abs(value)!r}}}`")
    if isinstance(value, dict):  # dataclasses.asdict's form (variants) holds both keys
        value = {k: v for k, v in value.items() if v is not None}
    if not isinstance(value, dict) or len(value) != 1 or \
            next(iter(value)) not in ("max_drop", "max_rise"):
        raise ParamsError(f"{key}: expected {expected}, found {value!r}")
    (direction, number), = value.items()
    if isinstance(number, bool) or not isinstance(number, (int, float)) \
            or not math.isfinite(number) or number <= 0:
        raise ParamsError(f"{key}.{direction}: expected a positive number (the largest "
                          f"{direction[4:]} allowed), found {number!r}")
    if want and direction != want:
        raise ParamsError(f"{key}: expected {expected}, found {{{direction}: {number!r}}}, "
                          f"which gates nothing that matters; write "
                          f"`{metric}: {{{want}: {number!r}}}`")
    if want == "max_drop" and number >= 1:
        raise ParamsError(f"{key}.max_drop: expected a fraction below 1 (a precision lies in "
                          f"[0, 1], so {number!r} lets every drop pass), found {number!r}; "
                          f"write e.g. `{metric}: {{max_drop: 0.02}}`")
    return Tolerance(**{direction: float(number)})


def build(cls: type, mapping: dict, prefix: str) -> Any:
    hints = typing.get_type_hints(cls, include_extras=True)  # extras: the Range of a field
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(mapping) - set(fields), key=str)
    if unknown:
        where = f"'{prefix}'" if prefix else "the top level"
        names = [f"{prefix}.{u}" if prefix else str(u) for u in unknown]
        raise ParamsError(
            f"unknown key {', '.join(names)} in params; valid keys in {where}: {', '.join(fields)}")
    kwargs = {}
    for name in fields:
        key = f"{prefix}.{name}" if prefix else name
        if name in mapping:
            kwargs[name] = _convert(mapping[name], hints[name], key)
        elif (fields[name].default is dataclasses.MISSING
              and fields[name].default_factory is dataclasses.MISSING):
            raise ParamsError(f"missing key {key} in params")
    return cls(**kwargs)


# The plain scalars YAML 1.2's core schema reads as numbers and booleans, as DVC reads
# params files (ruamel.yaml, YAML 1.2) to hash them. PyYAML reads YAML 1.1, which differs:
# ``0350`` is octal 232 there, ``1e-1`` and ``0o17`` are text, ``yes``/``on`` are booleans,
# ``1:30`` is 90. A param DVC hashes as one value and a stage reads as another would leave
# results stale while every tool says they are up to date; so the project reads as DVC does.
_YAML12 = {
    "bool": (re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), "tTfF"),
    "int": (re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0o?[0-7_]+|[-+]?[0-9_]+"
                       r"|[-+]?0x[0-9a-fA-F_]+)$"), "-+0123456789"),
    "float": (re.compile(r"^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?"
                         r"|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+"
                         r"|[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?"
                         r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), "-+0123456789."),
}


def yaml12_loader():
    """A PyYAML SafeLoader class that reads numbers and booleans as YAML 1.2 (DVC) does."""
    import yaml

    class Yaml12(yaml.SafeLoader):
        pass

    tags = {f"tag:yaml.org,2002:{kind}" for kind in _YAML12}
    Yaml12.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in tags]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    for kind, (regexp, first) in _YAML12.items():
        Yaml12.add_implicit_resolver(f"tag:yaml.org,2002:{kind}", regexp, list(first))

    def integer(loader, node):
        text = loader.construct_scalar(node).replace("_", "")
        sign = -1 if text[:1] == "-" else 1
        text = text.lstrip("+-")
        base = {"0b": 2, "0o": 8, "0x": 16}.get(text[:2])
        return sign * (int(text[2:], base) if base else int(text, 10))  # 0350 is 350

    def real(loader, node):
        text = loader.construct_scalar(node).replace("_", "").lower()
        sign = -1.0 if text[:1] == "-" else 1.0
        text = text.lstrip("+-")
        if text == ".inf":
            return sign * math.inf
        if text == ".nan":
            return math.nan
        return sign * float(text)

    Yaml12.add_constructor("tag:yaml.org,2002:int", integer)
    Yaml12.add_constructor("tag:yaml.org,2002:float", real)
    return Yaml12


def key_twice(text: str) -> Optional[tuple[str, int]]:
    """The first key a mapping of ``text`` holds twice, and its line; None if none. Each node
    is visited once (an alias shares its node: no alias bomb expands here). For the YAML
    files read outside the params loader (CI configurations, DVC's pipeline and lock)."""
    import yaml

    seen, todo = set(), [yaml.compose(text, Loader=yaml.SafeLoader)]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in keys:
                        return key.value, key.start_mark.line + 1
                    keys.add(key.value)
                todo.append(value)
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)
    return None


def load_yaml12(text: str):
    """``text`` parsed as DVC parses a params file (:func:`yaml12_loader`)."""
    import yaml

    return yaml.load(text, Loader=yaml12_loader())  # noqa: S506 (a SafeLoader)


PARAMS_LIMIT = 1 << 20  # bytes: a params file is a few KB; more is not one


def read_params_yaml(path, empty: str = "it would run every default") -> Any:
    """A params file parsed the way DVC reads it (YAML 1.2's numbers and booleans), strictly:
    UTF-8 text, no duplicate keys
    (DVC's reader refuses them too; PyYAML keeps the last silently), no aliases (``*name``:
    an alias bomb expands without end), no empty file (which read as all the defaults), and
    one line naming the file for anything else (``empty``: what an empty one would mean)."""
    import yaml

    class Strict(yaml12_loader()):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError(f"an alias (*{self.peek_event().anchor}) on line "
                                     f"{self.peek_event().start_mark.line + 1}: aliases are "
                                     f"not allowed in params; write the values out")
            return super().compose_node(parent, index)

    def mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.YAMLError(f"the key {key!r} appears twice (line "
                                     f"{key_node.start_mark.line + 1}); keep one")
            seen.add(key)
        return loader.construct_mapping(node, deep=deep)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    from .files import read_small_file

    try:
        text = read_small_file(path, PARAMS_LIMIT).decode("utf-8")
    except FileNotFoundError:
        # a mistyped path as often as the wrong folder: the folder it was read from says which
        raise ParamsError(f"{path}: no such file, where a params file is expected (read from "
                          f"{os.getcwd()}); check the path, and run the stages from the "
                          f"repository root") from None
    except IsADirectoryError:
        raise ParamsError(f"{path}: a folder; give --params a YAML file") from None
    except UnicodeDecodeError as exc:
        raise ParamsError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                          f"save it as UTF-8") from None
    except OSError as exc:  # a FIFO, a device, a loop of links, a huge file
        raise ParamsError(f"{path}: {exc.strerror}; give --params a YAML file") from None
    try:
        raw = yaml.load(text, Loader=Strict)  # noqa: S506 (Strict is a SafeLoader)
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ParamsError(f"{path}: nested too deeply to be params") from None
    except ValueError as exc:  # an integer of thousands of digits
        raise ParamsError(f"{path}: a value YAML cannot read ({str(exc)[:80]})") from None
    if raw is None:
        raise ParamsError(f"{path}: empty (or comments only): {empty}")
    return raw
