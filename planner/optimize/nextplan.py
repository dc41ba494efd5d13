"""The next canonical plan of the ranking's no-good-cut search, on the whole model or by blocks.

:func:`planner.optimize.alternatives.plan_alternatives` asks for plans one at a time: the
first on the plain model, the later ones on the model with the minimum-load rows
(``loaded``) or, once that is infeasible, on the plain model again, each time without the
deployed sets found so far. Each answer is the canonical optimum (:func:`run_solver`) of
that model with those cuts.

:class:`WholeModelSearch` adds each cut to the CP-SAT model and solves it again.
:class:`BlockSearch` gives the same plans when the model splits into independent blocks
(:mod:`planner.optimize.blocks`), which cuts over deployed sets would otherwise couple:

- A plan's cost and weighted replica sum T are sums over blocks, and its deployed set the
  union of its blocks' sets, so the canonical optimum without the sets F is the
  combination (S_1, ..., S_B) not in F with the least (sum of costs, sum of T), where each
  block contributes the least (cost, T) of its plans deploying exactly S_b.
- Each block lists its sets in that order by its own no-good-cut search (one small CP-SAT
  model per block, solved only as far as needed, nothing looked ahead): its i-th entry is
  the canonical optimum of the block without its first i - 1 sets, so the entries' (cost, T) never decrease and
  each carries the lexicographically least replicas and traffic of its set at that (cost, T).
- Combinations are visited in increasing (cost, T) from (0, ..., 0) by raising one index at
  a time (the k-best-sums successor rule, each combination once); among combinations that
  tie in (cost, T), the one with the lexicographically least replicas in candidate order
  comes first, as the whole model's lexicographic stage picks. Its traffic is its
  blocks' (with the replicas fixed every block's routing is independent).

A block solve that is not proven optimal ends the search as a whole-model one would.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from planner.optimize.instance import SolverOptions, SolveStatus
from planner.optimize.model import BuiltModel
from planner.optimize.cutseq import CutSequence, no_good_cut
from planner.optimize.solve import SolveResult, combine_results, plan_cost_units
from planner.optimize.tiebreak import tie_break_weight

#: The kinds of model a search step solves (see the module docstring).
FIRST, LOADED, PLAIN = "first", "loaded", "plain"


def add_min_load(model: cp_model.CpModel, built: BuiltModel, fraction: float) -> None:
    """Rows ``load_j >= ceil(fraction L_j) (y_j - spare_j)`` for every candidate j of ``built``."""
    if fraction <= 0:
        return
    ids = built.replicas.index
    owner = ids.get_indexer(built.traffic.index.get_level_values("candidate_id"))
    traffic, coef = built.traffic.tolist(), built.load_coef.to_numpy(np.int64).tolist()
    units = built.load_units_per_replica.reindex(ids).to_numpy(np.int64).tolist()
    spare = dict(zip(built.spare.index, built.spare.tolist()))
    for j, (cid, replicas) in enumerate(zip(ids, built.replicas.tolist())):
        mine = np.flatnonzero(owner == j).tolist()
        load = cp_model.LinearExpr.weighted_sum([traffic[i] for i in mine], [coef[i] for i in mine])
        floor_units = math.ceil(fraction * units[j])
        active = replicas - spare[cid] if cid in spare else replicas
        model.add(load >= floor_units * active).with_name(f"min_load[{cid}]")


def meets_min_load(built: BuiltModel, result: SolveResult, fraction: float) -> bool:
    """Whether a solution of ``built`` satisfies the rows of :func:`add_min_load` for some
    value of the spare variables (exact integer arithmetic on the model's units)."""
    if fraction <= 0:
        return True
    x = result.traffic_units.to_numpy(np.int64)
    pair_ids = built.traffic.index.get_level_values("candidate_id")
    pos = built.replicas.index.get_indexer(pair_ids)
    coef = built.load_coef.to_numpy(np.int64)
    load = np.zeros(len(built.replicas), dtype=object)
    np.add.at(load, pos, (coef * x).astype(object))
    red = np.isin(np.asarray(built.traffic.index.get_level_values("workload"), dtype=object),
                  list(built.instance.redundancy_workloads)) & (x > 0)
    must_spare = set(pair_ids[red])
    y = result.replicas.to_numpy(np.int64)
    for j, cid in enumerate(built.replicas.index):
        units = int(built.load_units_per_replica[cid])
        floor_units = math.ceil(fraction * units)      # as add_min_load rounds it
        spares = ((1,) if cid in must_spare else (0, 1)) if cid in built.spare.index else (0,)
        if not any(load[j] + units * s <= units * int(y[j]) and load[j] >= floor_units * (int(y[j]) - s)
                   for s in spares):
            return False
    return True


class WholeModelSearch:
    """The search on the whole model: each cut added to CP-SAT models solved again (each
    model's sequence of solves looks the next one ahead, :mod:`planner.optimize.cutseq`)."""

    def __init__(self, built: BuiltModel, options: SolverOptions, later: SolverOptions,
                 min_load_fraction: float):
        self.built, self.options, self.later, self.fraction = built, options, later, min_load_fraction
        self.plain, self.loaded = CutSequence(built, built.model.clone()), None
        self.speculative: frozenset | None = None    # the cut the loaded model was built with, ahead

    def next(self, kind: str, last=None) -> SolveResult:
        """The next plan of ``kind``; ``last``: see :meth:`CutSequence.solve`."""
        if kind == LOADED and self.loaded is None:
            self.loaded = self._loaded_sequence(self.plain.model.clone())
        if kind == FIRST:       # the next solve is of the loaded model: nothing to look ahead,
            # but its cost solve runs beside this plan's proof (the model with this plan's cut)
            return self.plain.solve(self.options, look_ahead=False, last=last, beside=self._loaded_ahead)
        return (self.loaded if kind == LOADED else self.plain).solve(self.later, last=last)

    def _loaded_sequence(self, model: cp_model.CpModel) -> CutSequence:
        add_min_load(model, self.built, self.fraction)
        return CutSequence(self.built, model, greedy=self.plain.greedy())

    def _loaded_ahead(self, support: frozenset) -> None:
        """The loaded sequence as :meth:`next` builds it once ``support`` is forbidden (the same
        rows in the same order), with its first cost solve done; :meth:`forbid` keeps it only
        when the first plan deploys ``support``."""
        model = self.plain.model.clone()
        model.add_bool_or(no_good_cut(self.built, support))
        loaded = self._loaded_sequence(model)
        loaded.pending = (support, loaded._cost_phase(loaded.model, self.later))
        self.loaded, self.speculative = loaded, support

    def forbid(self, used: set) -> None:
        speculative, self.speculative = self.speculative, None
        if speculative is not None and speculative != frozenset(used):
            self.loaded = None                  # built with another plan's cut: built again
        for sequence in (self.plain, self.loaded if speculative is None else None):
            if sequence is not None:
                sequence.forbid(used)


class _Undecided(Exception):
    """A block solve found no plan and proved nothing: the search stops."""


@dataclass
class _Entry:
    """One set of a block's list: its canonical result, (cost, T) key and deployed set."""

    result: SolveResult
    key: tuple[int, int]
    used: frozenset


class _BlockList:
    """The sets of one block in (cost, T) order, under one kind of model, solved on demand."""

    def __init__(self, block: BuiltModel, first: SolverOptions, later: SolverOptions, fraction: float | None,
                 mirror: "_BlockList | None" = None):
        self.block, self.first, self.later, self.fraction = block, first, later, fraction
        model = block.model.clone()
        if fraction is not None:
            add_min_load(model, block, fraction)
        self.sequence = CutSequence(block, model)
        # The plain model's list of this block: while its entries meet the minimum load they
        # are this (loaded) list's too (a canonical optimum of a model that also satisfies
        # added rows is the canonical optimum with them), so they are not solved again.
        self.mirror = mirror
        self.entries: list[_Entry] = []
        self.ended = False

    def get(self, i: int) -> _Entry | None:
        while len(self.entries) <= i and not self.ended:
            self._solve()
        return self.entries[i] if i < len(self.entries) else None

    def _solve(self) -> None:
        i = len(self.entries)
        if self.mirror is not None and i < len(self.mirror.entries):
            entry = self.mirror.entries[i]
            if meets_min_load(self.block, entry.result, self.fraction):
                self._add(entry)
                return
        self.mirror = None
        # No look-ahead: a block's list is read only as far as the combinations need, so its
        # next entry is often never asked for, and a block's full proof is a small solve
        # (issue 19, the large benchmark problem: 35 solves instead of 40, 9 % less CP-SAT work).
        result = self.sequence.solve(self.later if self.entries else self.first, look_ahead=False)
        if result.status == SolveStatus.INFEASIBLE:
            self.ended = True
            return
        if result.replicas is None:
            raise _Undecided
        y = result.replicas.to_numpy(np.int64)
        key = (plan_cost_units(self.block, y),
               int(self.block.tie_break_weights.to_numpy(np.int64) @ y))
        self._add(_Entry(result, key, frozenset(self.block.replicas.index[y > 0])))

    def _add(self, entry: _Entry) -> None:
        self.entries.append(entry)
        if entry.result.status != SolveStatus.OPTIMAL:
            self.ended = True            # later entries would not be trustworthy
            return
        self.sequence.forbid(entry.used)


class _Combinations:
    """Combinations of the blocks' lists in increasing summed (cost, T), each visited once."""

    def __init__(self, lists: list[_BlockList], order: np.ndarray):
        self.lists, self.order = lists, order
        self.heap: list = []
        self.seq = 0
        first = tuple(0 for _ in lists)
        if all(lst.get(0) is not None for lst in lists):
            self._push(first)
        self.expanded: set = set()

    def _push(self, combo: tuple) -> None:
        entries = [lst.get(i) for lst, i in zip(self.lists, combo)]
        key = (sum(e.key[0] for e in entries), sum(e.key[1] for e in entries))
        heapq.heappush(self.heap, (key, self.seq, combo))
        self.seq += 1

    def _expand(self, combo: tuple) -> None:
        if combo in self.expanded:
            return
        self.expanded.add(combo)
        last = max((b for b, i in enumerate(combo) if i > 0), default=0)
        for b in range(last, len(combo)):
            if self.lists[b].get(combo[b] + 1) is not None:
                self._push(combo[:b] + (combo[b] + 1,) + combo[b + 1:])

    def replicas(self, combo: tuple) -> tuple:
        """The combination's replicas in candidate order (the lexicographic tie-break)."""
        parts = [lst.get(i).result.replicas.to_numpy(np.int64) for lst, i in zip(self.lists, combo)]
        return tuple(np.concatenate(parts)[self.order])

    def used(self, combo: tuple) -> frozenset:
        return frozenset().union(*(lst.get(i).used for lst, i in zip(self.lists, combo)))

    def next(self, found: set) -> tuple | None:
        """The least combination whose deployed set is not in ``found`` (None when none is left)."""
        while self.heap:
            key = self.heap[0][0]
            tied = []
            while self.heap and self.heap[0][0] == key:
                combo = heapq.heappop(self.heap)[2]
                tied.append(combo)
                self._expand(combo)      # successors with the same key join the tie
            live = [c for c in tied if self.used(c) not in found]
            if not live:
                continue
            best = min(live, key=self.replicas)
            for combo in live:
                if combo is not best:
                    self._push(combo)
            return best
        return None


class BlockSearch:
    """The search by blocks (see the module docstring): the same plans as
    :class:`WholeModelSearch` of the whole model."""

    def __init__(self, built: BuiltModel, blocks: list[BuiltModel], options: SolverOptions,
                 later: SolverOptions, min_load_fraction: float):
        self.built, self.blocks, self.options, self.later = built, blocks, options, later
        self.fraction = min_load_fraction
        ids = np.concatenate([b.replicas.index.to_numpy(object) for b in blocks])
        self.order = np.argsort(ids, kind="stable")
        self.weight = tie_break_weight(built)
        self.found: set = set()
        self.searches: dict = {}

    def _search(self, kind: str) -> _Combinations:
        if kind not in self.searches:
            first = self.options if kind == FIRST else self.later
            fraction = self.fraction if kind == LOADED else None
            mirrors = self.searches[FIRST].lists if kind == LOADED else [None] * len(self.blocks)
            lists = [_BlockList(b, first, self.later, fraction, m) for b, m in zip(self.blocks, mirrors)]
            self.searches[kind] = _Combinations(lists, self.order)
        return self.searches[kind]

    def next(self, kind: str, last=None) -> SolveResult:
        """The next plan of ``kind`` (``last`` is not used: the block lists look nothing ahead)."""
        # the plain model after the first solve continues the first solve's lists
        start = time.perf_counter()
        search_kind = FIRST if kind in (FIRST, PLAIN) else LOADED
        try:
            search = self._search(search_kind)
            combo = search.next(self.found)
        except _Undecided:
            return SolveResult(SolveStatus.UNKNOWN, None, None, None, time.perf_counter() - start, {},
                               self.built.scales)
        if combo is None:
            return SolveResult(SolveStatus.INFEASIBLE, None, None, None, time.perf_counter() - start, {},
                               self.built.scales)
        results = [lst.get(i).result for lst, i in zip(search.lists, combo)]
        options = self.options if kind == FIRST else self.later
        return combine_results(self.built, self.blocks, results, options, self.weight,
                               time.perf_counter() - start)

    def forbid(self, used: set) -> None:
        self.found.add(frozenset(used))
