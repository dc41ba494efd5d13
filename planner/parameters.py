"""Which serving-model parameters apply: the seed defaults, then a calibration, then the
user's explicit overrides (problem YAML ``serving:`` or CLI flags), in that order.

A solve resolves them once per problem (:class:`ProblemParams`, built by the search) and
carries them to every stage; the calculators resolve one configuration with
:func:`for_configs` the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import cached_property, lru_cache

import numpy as np
import pandas as pd

from planner.catalog import DEFAULT_CATALOG_DIR
from planner.lookup import SortedIds
from planner.schema import PlanningInputError
from planner.serving.params import ServingParams


@lru_cache(maxsize=8)
def load(spec: str | None):
    """The calibration named by ``spec`` ('none', 'default' or a YAML path), or None.

    'default' is the shipped ``catalogs/calibration.yaml``; when that file is absent the
    seed defaults apply (None).
    """
    if spec is None or str(spec).lower() == "none":
        return None
    if str(spec) == "default" and not (DEFAULT_CATALOG_DIR / "calibration.yaml").exists():
        return None
    from planner.calibration import load_calibration

    try:
        return load_calibration(spec)
    except FileNotFoundError:
        raise PlanningInputError(f"calibration: file not found: {spec}") from None


def resolve(gpu_ids, calibration=None, overrides: dict | None = None, engine: str | None = None,
            model_ids=None, math_modes=None, layers=None, moe_layers=None, architectures=None) -> ServingParams:
    """Parameters per configuration row (arrays aligned with ``gpu_ids`` when calibrated).

    ``model_ids`` and ``math_modes`` (:meth:`planner.catalog.Catalog.math_modes`) per row
    select the calibration's per-model and per-math adjustments; ``layers`` (the models'
    layer and MoE-layer counts per row) and ``architectures`` (the GPUs') its per-layer step costs
    (:func:`catalog_keys`).
    """
    params = ServingParams()
    if calibration is not None:
        def per_row(values):
            return None if values is None else np.asarray(values, dtype=object)

        params = calibration.params_for(params, np.asarray(gpu_ids, dtype=object), engine=engine,
                                        model_ids=per_row(model_ids), math_modes=per_row(math_modes),
                                        layers=layers, moe_layers=moe_layers, architectures=architectures)
    return params.with_overrides(**(overrides or {}))


def for_configs(catalog, calibration, overrides: dict | None, engine: str | None, gpu_ids, formats,
                model_ids, models: dict | None = None, coded: list | None = None) -> ServingParams:
    """Parameters per configuration row (GPU, weight format, model), as every command resolves
    them: the calibration's GPU, engine, model and math levels (math modes and layer counts
    from the catalog, or from ``models``: extra ``ModelSpec`` by id, models imported from a
    config.json), then ``overrides``. ``coded``: the GPU, format and model columns as
    ``(codes, values)`` pairs without missing ids (codes >= 0;
    :meth:`planner.dimensions.Coded.factorize`), when the caller has them: the rows' ids are
    read from them instead of ``gpu_ids``, ``formats``, ``model_ids`` (the same parameters)."""
    if calibration is None:
        return resolve(gpu_ids, None, overrides, engine=engine)
    if coded is not None:
        pairs = [(np.asarray(c), np.asarray(v, dtype=object)) for c, v in coded]
    else:
        ids = [np.asarray(v, dtype=object).reshape(-1) for v in (gpu_ids, formats, model_ids)]
        if np.ndim(engine) or ids[0].size < 2:
            return _for_rows(catalog, calibration, overrides, engine, *ids, models)
        pairs = [pd.factorize(column, use_na_sentinel=False) for column in ids]
    if np.ndim(engine) or len(pairs[0][0]) < 2:
        return _for_rows(catalog, calibration, overrides, engine, *(v[c] for c, v in pairs), models)
    # once per distinct (GPU, format, model): every row's parameters are those of its ids
    first, inverse = _distinct_codes(pairs)
    params = _for_rows(catalog, calibration, overrides, engine, *(v[c[first]] for c, v in pairs), models)
    return replace(params, **{f.name: v[inverse] for f in fields(params)
                              if (v := np.asarray(getattr(params, f.name))).ndim == 1 and v.size == first.size})


def _for_rows(catalog, calibration, overrides, engine, gpu_ids, formats, model_ids, models) -> ServingParams:
    """:func:`for_configs` of the rows as they are (a calibration)."""
    maths = catalog.math_modes(gpu_ids, formats)
    keys = catalog_keys(catalog, gpu_ids, model_ids, models)
    return resolve(gpu_ids, calibration, overrides, engine=engine, model_ids=model_ids, math_modes=maths, **keys)


def _distinct_codes(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inverse)`` of the rows of columns given as ``(codes, values)``: the first row
    of each distinct combination (in order of first appearance) and per row its combination."""
    code = np.zeros(len(pairs[0][0]), dtype=np.int64)
    for codes, values in pairs:
        code, _ = pd.factorize(code * len(values) + codes)
    first = np.empty(code.max() + 1, dtype=np.int64)
    first[code[::-1]] = np.arange(code.size - 1, -1, -1)
    return first, code


def catalog_keys(catalog, gpu_ids, model_ids, models: dict | None = None) -> dict:
    """``layers``, ``moe_layers`` and ``architectures`` per row, the catalog facts the
    calibration's per-layer step costs need (``Calibration.params_for``); ``models``: extra
    ``ModelSpec`` by id (imported models). ``moe_layers``: every layer of a model with routed
    experts, 0 for a dense model (the catalog has no per-layer layout, so DeepSeek's three
    dense layers count too)."""
    def spec(m):
        return (models or {}).get(m) or catalog.model(m)

    return {"layers": _per_id(model_ids, lambda m: float(spec(m).num_layers), float),
            "moe_layers": _per_id(model_ids, lambda m: float(spec(m).num_layers) * (spec(m).num_experts > 0), float),
            "architectures": gpu_architectures(catalog, gpu_ids)}


def gpu_architectures(catalog, gpu_ids) -> np.ndarray:
    """Compute architecture of each GPU id (``GpuSpec.architecture``, else its vendor): the
    calibration's platform level, the engine's build per architecture."""
    return _per_id(gpu_ids, lambda g: catalog.gpu(g).architecture or catalog.gpu(g).vendor, object)


def _per_id(ids, value_of, dtype) -> np.ndarray:
    """``value_of(id)`` for every row of ``ids``, computed once per distinct id."""
    ids = pd.Series(np.asarray(ids, dtype=object).reshape(-1))
    return ids.map({i: value_of(i) for i in ids.unique()}).to_numpy(dtype)


def concat(parts: list[ServingParams], sizes: list[int]) -> ServingParams:
    """The parameters of consecutive blocks of rows (``sizes[i]`` rows have ``parts[i]``), as one;
    a field that is the same scalar in every part stays that scalar."""
    values = {}
    for f in fields(ServingParams):
        each = [getattr(p, f.name) for p in parts]
        if all(np.ndim(v) == 0 for v in each) and all(v == each[0] for v in each):
            values[f.name] = each[0]
        else:
            values[f.name] = np.concatenate([np.broadcast_to(np.asarray(v, dtype=float), (n,))
                                             for v, n in zip(each, sizes)])
    return ServingParams(**values)


@dataclass(frozen=True, eq=False)
class ProblemParams:
    """A problem's serving-model parameters, resolved once and carried to every stage.

    Attributes
    ----------
    overrides : dict
        The problem's explicit ``serving:`` values.
    base : ServingParams
        The seed defaults with the overrides, before any calibration (what the report lists
        and the launch settings use).
    used : dict
        :func:`describe`: calibration, engine and overrides, for the outputs.
    ids : pandas.Index
        The candidates with parameters of their own (the evaluated configurations).
    per_candidate : ServingParams or None
        Their parameters (calibrated per GPU, model and math mode, then the overrides): array
        fields aligned with ``ids``, scalar fields shared.
    id_order : numpy.ndarray or None
        The permutation that sorts ``ids`` (the search knows it without a string sort): with
        it, :meth:`of` finds rows by binary search instead of hashing every id first.
    """

    overrides: dict
    base: ServingParams
    used: dict
    ids: pd.Index = field(default_factory=lambda: pd.Index([], dtype=object, name="candidate_id"))
    per_candidate: ServingParams | None = None
    id_order: np.ndarray | None = None

    @cached_property
    def _sorted_ids(self) -> SortedIds | None:
        return None if self.id_order is None else SortedIds(self.ids, self.id_order)

    def of(self, rows: pd.DataFrame) -> ServingParams:
        """The parameters of the candidate rows ``rows`` (indexed by ``candidate_id``; repeats
        allowed). KeyError for a candidate that was not evaluated."""
        pos = self.ids.get_indexer(rows.index) if self._sorted_ids is None else self._sorted_ids.positions(rows.index)
        if self.per_candidate is None or (pos < 0).any():
            missing = rows.index[pos < 0]
            raise KeyError(f"no serving parameters for candidate {missing[0] if len(missing) else '?'}")
        return self.per_candidate.take(pos)


def describe(calibration, overrides: dict | None = None, engine: str | None = None) -> dict:
    """What was used, for every output: the calibration (or 'none') and explicit overrides."""
    return {"calibration": calibration.describe() if calibration is not None else "none (seed defaults)",
            "engine": engine, "overrides": dict(overrides or {})}


def scalars(params: ServingParams) -> dict:
    """``params`` as a dict, one-element arrays as plain numbers (one configuration)."""
    out = {}
    for k, v in params.as_dict().items():
        a = np.asarray(v, dtype=float)
        out[k] = float(a.reshape(-1)[0]) if a.size == 1 else a.tolist()
    return out


def _calibration(calibration):
    """A Calibration from a spec ('none', 'default', a path) or a Calibration (or None)."""
    return load(calibration) if calibration is None or isinstance(calibration, str) else calibration


def error_quantile(family: str, q: float, gpu: str | None = None, engine: str | None = None,
                   calibration="default") -> float:
    """Multiplicative error factor of the calibrated model at quantile ``q``.

    measured / predicted stays below the returned factor with probability ``q``, judged on
    the calibration's out-of-fold errors (:mod:`planner.calibration_intervals`) for the
    metric ``family`` (``ttft``, ``tpot_itl``, ``throughput``, ``e2e``, or an output name:
    ``ttft_p95_s``, ``tpot_s``, ...) and the most specific scope of ``gpu``'s vendor and
    ``engine`` (``trtllm@1.2`` counts as ``trtllm``) with data. So a latency at confidence
    q is ``predicted * error_quantile(family, q, gpu, engine)``. 1.0 for ``'none'`` or a
    calibration without intervals. ``calibration``: 'default', 'none', a path or a
    Calibration. ValueError for q outside (0, 1) or an unknown family.
    """
    from planner.calibration_intervals import error_factor, family_of

    family_of(family)
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    cal = _calibration(calibration)
    return 1.0 if cal is None else error_factor(cal.intervals, family, q, gpu, engine)


def gpu_status(calibration, gpu_id: str) -> dict:
    """``calibrated``, ``calibration_status`` and (uncalibrated GPUs) ``calibration_prior`` of a
    GPU under ``calibration`` (a Calibration or None: 'none', the seed defaults)."""
    if calibration is None:
        return {"calibrated": False, "calibration_status": "none (seed defaults)"}
    return calibration.gpu_status(gpu_id)


def prediction_intervals(calibration, values: dict, gpu: str | None = None, engine: str | None = None) -> dict:
    """80 % and 95 % intervals ``{name: {"p80": [lo, hi], "p95": [lo, hi]}}`` around the
    predicted ``values`` (``{"ttft_s": ..., "tpot_s": ...}``); {} without a calibration or
    without intervals in it."""
    from planner.calibration_intervals import intervals_for

    return {} if calibration is None else intervals_for(calibration.intervals, values, gpu, engine)
