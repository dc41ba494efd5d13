"""Procurement over time: one fleet plan across periods, daily load curves, scenario risk.

Modules: :mod:`.spec` (the ``procurement:`` section), :mod:`.prices` (tier prices),
:mod:`.fleet` (the multi-period CP-SAT model), :mod:`.inputs` (serving model once, options),
:mod:`.profile` (daily load profile), :mod:`.budget` (the proposal), :mod:`.risk`
(scenario sampling and executors).
"""

from planner.procurement.budget import BudgetResult, budget, budget_setup, solve_options
from planner.procurement.fleet import FleetInputs, FleetPlan, Tier, depreciation_usd, solve_fleet
from planner.procurement.prices import (PriceQuote, own_costs_per_gpu_hour, power_watts, purchase_quote,
                                        rent_quote)
from planner.procurement.spec import (BuyOption, ProcurementSpec, RentOption, parse_procurement, periods,
                                      traffic_scale)

__all__ = ["BudgetResult", "BuyOption", "FleetInputs", "FleetPlan", "PriceQuote", "ProcurementSpec",
           "RentOption", "Tier", "budget", "budget_setup", "depreciation_usd", "own_costs_per_gpu_hour",
           "parse_procurement", "periods", "power_watts", "purchase_quote", "rent_quote", "solve_fleet",
           "solve_options", "traffic_scale"]
