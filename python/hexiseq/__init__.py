"""HexiSeq from Python: plan long-context training on heterogeneous GPU clusters.

The planning API (load_cluster, model, plan, compare, simulate, validate, Plan) calls the same
C++ library as the `hexiseq` command, so its results equal the command's JSON. Errors raise
hexiseq.Error subclasses carrying the library's message (field, value, rule, hint).
`hexiseq.torch` (imported on its own) runs a plan's distributed attention inside PyTorch.
"""

from ._core import (  # noqa: F401
    Cluster,
    Error,
    InfeasibleError,
    InternalError,
    InvalidArgumentError,
    IoError,
    Model,
    NotSupportedError,
    Plan,
    PlanGroup,
    PlanMember,
    compare,
    load_cluster,
    model,
    plan,
    simulate,
    strategies,
    validate,
)

__all__ = [
    "Cluster", "Error", "InfeasibleError", "InternalError", "InvalidArgumentError", "IoError",
    "Model", "NotSupportedError", "Plan", "PlanGroup", "PlanMember", "compare", "load_cluster",
    "model", "plan", "simulate", "strategies", "validate",
]
