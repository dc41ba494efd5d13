"""The configuration dimensions, declared once.

A configuration (one candidate of the search) has one value per dimension of
:data:`DIMENSIONS`: model, GPU type, tensor- and pipeline-parallel degrees, weight format,
KV-cache dtype, max batch (slots per replica), expert-parallel size and attention data
parallelism (issue 14). This module is the only code that knows
them: candidate ids (:func:`candidate_ids`), the configuration labels of the outputs
(:func:`label`), the configuration columns of plans (:data:`NAMES`, :data:`SETTINGS`) and
the derived quantities (:func:`gpus_per_replica`, :data:`DERIVED`) come from here.

Adding a dimension is one entry of :data:`DIMENSIONS`. Give it a ``default`` (the value
every configuration had before it existed): a configuration at the default contributes
nothing to its id or labels, so existing ids and outputs stay the same, and a frame
without the column reads as the default.

Label styles (each dimension's ``labels`` maps a style to a format whose ``{}`` is the
value, leading separator included; a dimension without a format for a style is not shown):

- ``pareto``: the ``deployments`` column of ``pareto.csv``, after the replica count
  (``h100-sxm tp4 pp1 fp8/bf16 b64``);
- ``table``: the configuration column of the report's tables (``tp4 pp1 fp8/kv-bf16 b64``);
- ``text``: ``planner solve``'s text output (``tp4 pp1 fp8/kv-bf16 max_batch 64``);
- ``launch``: the deployment list of ``launch/README.md``
  (``llama-3.1-70b fp8/kv-bf16, max batch 64``).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

#: The label styles (see the module docstring).
STYLES = ("pareto", "table", "text", "launch")


@dataclass(frozen=True)
class Dimension:
    """One dimension of a configuration.

    ``name`` is its column in the candidate and plan tables and its key in the JSON result;
    ``dtype`` the Python type of one value; ``labels`` its format per label style;
    ``searched`` the values a problem searches (a function of the loaded
    :class:`planner.problem.Problem`; None for the model, which the search takes per
    workload model; see :func:`search_values`) and ``noun`` what they are called in
    messages ("4 tp");
    ``default`` the value configurations had before the dimension existed (None: none,
    the dimension is always part of the id and the labels).
    """

    name: str
    dtype: type
    labels: Mapping[str, str]
    doc: str
    searched: Callable[[Any], Sequence] | None = None
    noun: str = ""
    default: Any = None

    def value(self, raw) -> Any:
        """``raw`` as this dimension's Python type; None for a missing value (None or NaN)."""
        if raw is None or (isinstance(raw, float) and math.isnan(raw)):
            return None
        return self.dtype(raw)

    def is_default(self, raw) -> bool:
        """Whether ``raw`` is the default (or missing) value of a dimension that has a default."""
        value = self.value(raw)
        return self.default is not None and (value is None or value == self.default)

    def label(self, raw, style: str) -> str:
        """This dimension's part of a ``style`` label ('' when not shown)."""
        if style not in STYLES:
            raise ValueError(f"unknown label style '{style}', expected one of {STYLES}")
        fmt = self.labels.get(style)
        if fmt is None or self.is_default(raw):
            return ""
        return fmt.format(self.value(raw))


def _layout_values(problem, name: str) -> Sequence | None:
    """The values of layout dimension ``name`` (``ep``, ``attention_dp``) searched, or None
    when the problem searches only the dense layout (ep [1], attention_dp [false]): both are
    then left out of the grid, so a problem without the keys keeps its outputs byte for
    byte; a problem that searches either gets both columns (every deployment states both)."""
    s = problem.spec.search
    return None if (tuple(s.ep), tuple(s.attention_dp)) == ((1,), (False,)) else getattr(s, name)
def _searched_roles(disaggregation) -> tuple[str, ...] | None:
    """The roles a ``search: disaggregation`` list searches: ``both`` for false, ``prefill``
    and ``decode`` for true; None (not searched: every configuration is ``both``) when the
    problem gives no list or only false."""
    values = tuple(disaggregation or ())
    if not any(values):
        return None
    return (("both",) if False in values else ()) + ("prefill", "decode")


#: Every dimension of a configuration, in canonical order (ids hash them in this order,
#: the candidate grid and the plan tables list them in this order).
DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("model", str, {"launch": "{}"},
              doc="model id (catalogs/models.yaml or an imported config)", noun="model(s)"),
    Dimension("gpu", str, {"pareto": "{}"},
              doc="GPU type id (catalogs/gpus.yaml)", searched=lambda p: p.gpus, noun="GPUs"),
    Dimension("tp", int, {"pareto": " tp{}", "table": " tp{}", "text": " tp{}"},
              doc="tensor-parallel degree (GPUs per pipeline stage)",
              searched=lambda p: p.spec.search.tp, noun="tp"),
    Dimension("pp", int, {"pareto": " pp{}", "table": " pp{}", "text": " pp{}"},
              doc="pipeline-parallel degree (stages per replica)",
              searched=lambda p: p.spec.search.pp, noun="pp"),
    Dimension("quantization", str, {"pareto": " {}", "table": " {}", "text": " {}", "launch": " {}"},
              doc="weight format id (catalogs/quantization.yaml)",
              searched=lambda p: p.quantization, noun="formats"),
    Dimension("kv_cache_dtype", str, {"pareto": "/{}", "table": "/kv-{}", "text": "/kv-{}", "launch": "/kv-{}"},
              doc="KV-cache dtype id (catalogs/quantization.yaml)",
              searched=lambda p: p.kv_cache_dtypes, noun="KV dtypes"),
    Dimension("max_batch", int, {"pareto": " b{}", "table": " b{}", "text": " max_batch {}",
                                 "launch": ", max batch {}"},
              doc="max batch: concurrent sequences (slots) per replica",
              searched=lambda p: p.spec.search.max_batch, noun="batch sizes"),
    Dimension("ep", int, {"pareto": " ep{}", "table": " ep{}", "text": " ep{}", "launch": ", ep {}"},
              doc="expert-parallel size inside the tp GPUs of a stage (1: experts split by TP; "
                  "planner/layout_rules.py)",
              searched=lambda p: _layout_values(p, "ep"), noun="ep", default=1),
    Dimension("attention_dp", bool, {"pareto": " dpa", "table": " dpa", "text": " attention-dp",
                                     "launch": ", attention DP"},
              doc="attention data parallelism: tp attention ranks of one GPU each (false: attention TP)",
              searched=lambda p: _layout_values(p, "attention_dp"),
              noun="attention-DP settings", default=False),
    Dimension("role", str, {"pareto": " {}", "table": " {}", "text": " {}", "launch": " ({})"},
              doc="serving role: both (aggregated), prefill or decode (disaggregated pools)",
              searched=lambda p: _searched_roles(getattr(p.spec.search, "disaggregation", None)),
              noun="roles", default="both"),
)

#: Names of every dimension, in canonical order (the configuration key).
NAMES: tuple[str, ...] = tuple(d.name for d in DIMENSIONS)
#: The dimensions a deployment sets besides its model and GPU type, in canonical order.
SETTINGS: tuple[str, ...] = tuple(n for n in NAMES if n not in ("model", "gpu"))

_BY_NAME = {d.name: d for d in DIMENSIONS}


def dimension(name: str) -> Dimension:
    """The declared dimension called ``name``."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown configuration dimension '{name}', expected one of {NAMES}") from None


def value_of(config, name: str):
    """Dimension ``name`` of a configuration: a DataFrame (the column), Series or mapping (by
    key), or any object with attributes (ConfigArrays, a dataclass, an ``itertuples`` row).
    Absent: the dimension's default; absent without a default: KeyError."""
    if isinstance(config, (pd.DataFrame, pd.Series, Mapping)):
        keys = config.columns if isinstance(config, pd.DataFrame) else config.keys()
        if name in keys:
            return config[name]
    elif hasattr(config, name):
        return getattr(config, name)
    default = dimension(name).default
    if default is None:
        raise KeyError(f"the configuration has no '{name}' ({type(config).__name__})")
    return default


# ----------------------------------------------------------------------------- search


def search_values(problem) -> dict[str, Sequence]:
    """The values ``problem`` searches per dimension (all but the model, which the search
    takes from the workloads one at a time), in canonical order. A dimension with a default
    whose ``searched`` gives None is left out: the problem does not search it, its column
    stays out of the grid and reads as the default."""
    values = {d.name: d.searched(problem) for d in DIMENSIONS if d.searched is not None}
    return {n: v for n, v in values.items() if v is not None or dimension(n).default is None}


def grid_description(problem, models: int) -> tuple[int, str]:
    """``(size, text)`` of the search grid of ``models`` models: its number of configurations
    and a text such as "1 model(s) x 4 GPUs x 3 tp x ... x 9 batch sizes"."""
    values = search_values(problem)
    size = models * math.prod(len(v) for v in values.values())
    parts = [f"{models} {dimension('model').noun}",
             *(f"{len(v)} {dimension(n).noun}" for n, v in values.items())]
    return size, " x ".join(parts)


# ----------------------------------------------------------------------------- derived


def gpus_per_replica(config):
    """GPUs of one replica: tp x pp. ``config``: a frame, row, mapping or object with the
    dimensions; scalars give a scalar, columns / arrays give the elementwise product."""
    return value_of(config, "tp") * value_of(config, "pp")


#: Derived columns of the candidate table: name -> function of a configuration frame.
DERIVED: dict[str, Callable] = {"gpus": gpus_per_replica}


# ----------------------------------------------------------------------------- labels


def label(config, style: str) -> str:
    """The configuration's label in ``style`` (see the module docstring); ``config`` is a
    mapping, Series or object with the dimensions (:func:`value_of`)."""
    return "".join(d.label(value_of(config, d.name), style) for d in DIMENSIONS).lstrip()


def has_settings(config) -> bool:
    """Whether ``config`` (a mapping, Series, or a frame's columns) carries the settings of a
    configuration: measured capacity-table candidates have only a name and a GPU type."""
    keys = config.columns if isinstance(config, pd.DataFrame) else config
    return all(n in keys for n in SETTINGS if dimension(n).default is None)


# ----------------------------------------------------------------------------- ids


#: Multiplier of the id hash's column mixing (64-bit, odd; from splitmix64).
_MIX = np.uint64(0x9E3779B97F4A7C15)
#: Hex digits of a candidate id after its "c" prefix.
ID_HEX_DIGITS = 12


def _value_hash(value: str) -> int:
    return int.from_bytes(hashlib.sha1(value.encode()).digest()[:8], "little")


def candidate_ids(frame: pd.DataFrame) -> pd.Series:
    """Stable id per configuration: "c" and 12 hex digits of a 64-bit hash of its key.

    Each dimension's value ``name=value`` is hashed with SHA-1 (once per distinct value)
    and the dimensions are mixed in canonical order with a splitmix64-style step, all
    vectorized; the same configuration gets the same id in every run, on every machine.
    A dimension at its default (or absent from ``frame``) is skipped, so adding a
    dimension with a default keeps every existing id.
    """
    return pd.Series(id_strings(candidate_hashes(frame)), index=frame.index)


def candidate_hashes(frame: pd.DataFrame, coded: Mapping[str, Coded] | None = None) -> np.ndarray:
    """The 64-bit hashes behind :func:`candidate_ids` (the id is the top 48 bits in hex, so
    the ids sort as ``hashes >> 16`` do). ``coded``: :class:`Coded` forms of (some of) the
    frame's columns, used instead of them (the same hashes), or of columns it leaves out."""
    grid = _grid_hashes(frame, coded)
    if grid is not None:
        return grid
    h = np.zeros(len(frame), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for d in DIMENSIONS:
            if d.name not in frame.columns and (coded is None or d.name not in coded):
                if d.default is None:
                    raise KeyError(f"candidate_ids: the frame has no column '{d.name}'")
                continue
            if coded is not None and d.name in coded:
                codes, texts, defaults = coded[d.name].distinct_values(d)
            else:
                codes, texts, defaults = _distinct_values(frame[d.name], d)
            values = np.array([_value_hash(f"{d.name}={u}") for u in texts], dtype=np.uint64)
            mixed = _mixed(h, values[codes])
            if d.default is None:
                h = mixed
            else:
                h = np.where(defaults, h, mixed)
    return h


def _mixed(h: np.ndarray, values: np.ndarray) -> np.ndarray:
    """One dimension's step of the id hash: (h xor value) x MIX, then xor its top bits down."""
    with np.errstate(over="ignore"):
        mixed = (h ^ values) * _MIX
    mixed ^= mixed >> np.uint64(31)
    return mixed


def _grid_hashes(frame: pd.DataFrame, coded: Mapping[str, Coded] | None) -> np.ndarray | None:
    """:func:`candidate_hashes` of a whole grid (:meth:`CandidateTable.coded_grid`), or None.
    Speed (the same bits): the rows are the product of the columns' distinct values in
    canonical order, so the hash after each dimension is computed once per combination of
    the dimensions up to it (the same operations on the same numbers as a row's)."""
    names = [d.name for d in DIMENSIONS if d.name in frame.columns or (coded is not None and d.name in coded)]
    if coded is None or not names or any(n not in coded or coded[n].inner is None for n in names):
        return None
    inner = len(frame)
    for n in names:                                   # row r has value (r // inner) % size
        inner //= max(len(coded[n].distinct), 1)
        if coded[n].inner != inner:
            return None
    if inner != 1 or any(d.default is None and d.name not in names for d in DIMENSIONS):
        return None
    h = np.zeros(1, dtype=np.uint64)
    for d in DIMENSIONS:
        if d.name not in names:
            continue
        codes, texts, defaults = _distinct_values(coded[d.name].distinct, d)
        values = np.array([_value_hash(f"{d.name}={u}") for u in texts], dtype=np.uint64)[codes]
        step = _mixed(h[:, None], values[None, :])
        if defaults is not None:
            step = np.where(defaults[None, :], h[:, None], step)
        h = step.reshape(-1)
    return h


def factorize_column(column) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize`` of one column (codes, -1 for a missing value; distinct values in
    order of first appearance); a string column is factorized as its object array (half
    the time of pandas' string-array factorize on the search grid's 54,720 rows)."""
    if isinstance(column, pd.Series) and isinstance(column.dtype, pd.StringDtype) \
            and column.dtype.storage == "python":
        return pd.factorize(column.to_numpy(dtype=object))
    return pd.factorize(column)


def _distinct_values(column: pd.Series, d: Dimension) -> tuple[np.ndarray, list, np.ndarray | None]:
    """``(codes, texts, defaults)``: per row the code of its value, the ``str`` of each
    distinct value (as ``column.astype(str)`` writes it) and, for a dimension with a
    default, per row whether the value is the default (``d.is_default``).

    Integer, boolean and string columns without missing values are factorized as they
    are, and the text and default are taken once per distinct value (speed: 74,880 rows in
    a few ms); other columns (floats, mixed objects, missing values) go through
    ``astype(str)`` and a per-row ``is_default`` as before.
    """
    kind = column.dtype.kind
    if kind in "iub" or (pd.api.types.is_string_dtype(column.dtype)
                         and (kind != "O" or pd.api.types.infer_dtype(column, skipna=False) == "string")):
        codes, uniques = factorize_column(column)
        if not (codes < 0).any():         # no missing value
            raw = list(uniques)
            defaults = None if d.default is None else np.array([d.is_default(u) for u in raw], dtype=bool)[codes]
            return codes, [str(u) for u in raw], defaults
    codes, uniques = pd.factorize(column.astype(str))
    defaults = None if d.default is None else column.map(d.is_default).to_numpy(bool)
    return codes, list(uniques), defaults


@dataclass(frozen=True)
class Coded:
    """A column given as its distinct values and the rows' positions into them: the column
    is ``distinct.take(index)``. Its codes (:meth:`factorize`) and hash inputs
    (:meth:`distinct_values`) are computed on the few distinct values and taken to the rows
    (speed: the search grid's columns, without a pass over their values)."""

    distinct: pd.Series
    index: np.ndarray
    #: For a column of the grid (:meth:`CandidateTable.coded_grid`): the rows per run of one
    #: value (``index`` is ``(row // inner) % len(distinct)``); None: any index.
    inner: int | None = None

    @classmethod
    def of(cls, column: pd.Series) -> "Coded":
        """A column as it is (each row its own distinct value)."""
        return cls(column.reset_index(drop=True), np.arange(len(column)))

    def take(self, rows) -> "Coded":
        """The column's rows at positions ``rows``."""
        return Coded(self.distinct, self.index[rows])

    def factorize(self) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, uniques)`` of the column as :func:`factorize_column` makes them, except
        that ``uniques`` are all of the distinct values, in their own order (some may not
        occur in the rows): for lookups once per distinct value, taken to the rows by code.
        The codes may be the column's own ``index`` array: read them, do not write."""
        codes, uniques = factorize_column(self.distinct)
        if np.array_equal(codes, np.arange(len(codes))):   # each value once (a grid): its codes are the index
            return self.index, uniques
        return codes[self.index], uniques

    def distinct_values(self, d: Dimension) -> tuple[np.ndarray, list, np.ndarray | None]:
        """:func:`_distinct_values` of the column for dimension ``d``."""
        codes, texts, defaults = _distinct_values(self.distinct, d)
        return codes[self.index], texts, None if defaults is None else defaults[self.index]


def values_at(distinct: pd.Series, positions: np.ndarray):
    """The values of ``distinct`` at ``positions``, typed as the Series is: a numpy array
    for a numpy dtype (numpy's take: without the extension array's index checks, speed),
    else its extension array's take (a str column stays str)."""
    if isinstance(distinct.dtype, np.dtype):
        return distinct.to_numpy().take(positions)
    return distinct.array.take(positions)


#: Each byte's two hex digits as one 8-byte little-endian word: two UCS-4 code points, the
#: high digit first in memory (ids are built as code-point arrays, two digits per step; no
#: text codec: its module import costs a run's start some ms).
_HEX_DIGITS = np.array([ord(c) for c in "0123456789abcdef"], dtype=np.uint64)
_HEX_PAIRS = (_HEX_DIGITS[np.arange(256) >> 4] | (_HEX_DIGITS[np.arange(256) & 15] << np.uint64(32))).astype("<u8")


def id_strings(hashes: np.ndarray) -> np.ndarray:
    """"c" and the top ``ID_HEX_DIGITS`` hex digits of each 64-bit hash (a str array; the
    same text as ``"c" + "%016x" % h`` cut to 13 characters)."""
    h = np.asarray(hashes, dtype=np.uint64).reshape(-1)
    pairs = -(-ID_HEX_DIGITS // 2)                      # bytes of the hash read, top first
    words = np.empty((len(h), pairs + 1), dtype="<u8")  # [unused, "c"], then two digits per byte
    words[:, 1:] = _HEX_PAIRS[h.astype(">u8").view(np.uint8).reshape(len(h), 8)[:, :pairs]]
    points = words.view("<u4").reshape(len(h), 2 * pairs + 2)
    points[:, 1] = ord("c")
    return np.ascontiguousarray(points[:, 1:ID_HEX_DIGITS + 2]).view(f"<U{ID_HEX_DIGITS + 1}").reshape(len(h))


# ----------------------------------------------------------------------------- table


@dataclass(frozen=True)
class CandidateTable:
    """Configurations, one row each: the dimension columns (plus any evaluated columns).

    A thin typed wrapper of the candidates DataFrame; ``frame`` is the DataFrame itself.
    """

    frame: pd.DataFrame

    @classmethod
    def grid(cls, values: Mapping[str, Sequence]) -> CandidateTable:
        """Every combination of ``values`` (dimension name -> values searched), in canonical
        order (the last dimension varies fastest). Dimensions with a default may be left out
        (their column is then absent and reads as the default)."""
        return cls.coded_grid(values)[0]

    @classmethod
    def coded_grid(cls, values: Mapping[str, Sequence], texts: bool = True) -> tuple[CandidateTable, dict[str, Coded]]:
        """:meth:`grid` and, per column, its :class:`Coded` factorization (from the product's
        structure: no pass over the rows' values). ``texts=False``: the text columns (model,
        GPU, ...) only as their Coded forms, not in the frame (speed: read by code)."""
        unknown = [n for n in values if n not in _BY_NAME]
        missing = [d.name for d in DIMENSIONS if d.name not in values and d.default is None]
        if unknown or missing:
            raise KeyError(f"CandidateTable.grid: unknown dimensions {unknown}, missing {missing}")
        names = [n for n in NAMES if n in values]
        seqs = [list(values[n]) for n in names]
        size = math.prod(len(v) for v in seqs)
        if not size:
            frame = pd.DataFrame(list(itertools.product(*seqs)), columns=names)
            return cls(frame), {n: Coded.of(frame[n]) for n in names}
        # Column by column (speed): each dimension's distinct values typed as the rows'
        # DataFrame would type them, then repeated in the product's order (the values'
        # array taken: no Series index to copy, one frame construction).
        columns, coded, inner = {}, {}, size
        for name, seq in zip(names, seqs):
            inner //= len(seq)
            # (r // inner) % len(seq) per row r: broadcast over (outer, values, inner), copied flat (speed)
            shape = (size // (inner * len(seq)), len(seq), inner)
            index = np.broadcast_to(np.arange(len(seq))[:, None], shape).reshape(-1)
            distinct = pd.DataFrame([(v,) for v in seq], columns=[name])[name]
            if texts or isinstance(distinct.dtype, np.dtype):
                columns[name] = values_at(distinct, index)
            coded[name] = Coded(distinct, index, inner)
        return cls(pd.DataFrame(columns, copy=False)), coded

    def __len__(self) -> int:
        return len(self.frame)

    def take(self, rows) -> CandidateTable:
        """The configurations at positions ``rows`` (an integer array or boolean mask)."""
        return CandidateTable(self.frame.iloc[np.asarray(rows)])

    def ids(self) -> pd.Series:
        """:func:`candidate_ids` of the rows."""
        return candidate_ids(self.frame)

    def labels(self, style: str) -> list[str]:
        """:func:`label` of each row."""
        return [label(row, style) for _, row in self.frame.iterrows()]

    def with_derived(self) -> CandidateTable:
        """The table with the :data:`DERIVED` columns (after the existing ones)."""
        return CandidateTable(self.frame.assign(**{name: f(self.frame) for name, f in DERIVED.items()}))

    def factorize(self, names: Sequence[str]) -> tuple[np.ndarray, pd.DataFrame]:
        """``(codes, uniques)``: one integer per row, equal for rows with equal values of the
        dimensions ``names`` (numbered in order of first appearance), and the distinct value
        combinations (one row per code, columns ``names`` present in the table)."""
        present = [n for n in names if n in self.frame.columns]
        for n in names:
            if n not in present and dimension(n).default is None:
                raise KeyError(f"factorize: the table has no column '{n}'")
        parts = [factorize_column(self.frame[n]) for n in present]
        sizes = [len(distinct) for _, distinct in parts]
        if (not present or self.frame.empty or any((codes < 0).any() for codes, _ in parts)
                or math.prod(sizes) >= 2 ** 62):
            codes, uniques = pd.factorize(pd.MultiIndex.from_frame(self.frame[present]))
            return codes, pd.DataFrame(uniques.tolist(), columns=present)
        # Speed: mixed-radix codes of the columns' own codes instead of a MultiIndex of
        # tuples, numbered in order of first appearance as the MultiIndex's factorize does.
        key = np.zeros(len(self.frame), dtype=np.int64)
        for (part, _), size in zip(parts, sizes):
            key = key * size + part
        codes, distinct = pd.factorize(key)
        first = np.unique(codes, return_index=True)[1]
        rows = self.frame[present].iloc[first]
        return codes, pd.DataFrame(list(rows.itertuples(index=False, name=None)), columns=present)
