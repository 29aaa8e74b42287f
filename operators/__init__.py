"""Operator base classes and the built-in operator library.

Kernels are pure numpy (numpy in, numpy out); operator classes hold planning (output shape,
parallelization, mapping functions, supported lineage modes).
"""

from operators.base import (
    ELEMENTWISE,
    GLOBAL,
    AllToAllOperator,
    CellMapping,
    ElementwiseOperator,
    MappingOperator,
    Operator,
    Parallelism,
    StencilOperator,
    UDF,
    stencil,
)
from operators.elementwise import Affine, Binary, Cast, Unary
from operators.reductions import MeanBroadcast
from operators.stencils import Convolve, MedianFilter

__all__ = [
    "ELEMENTWISE", "GLOBAL", "AllToAllOperator", "CellMapping", "ElementwiseOperator",
    "MappingOperator", "Operator", "Parallelism", "StencilOperator", "UDF", "stencil",
    "Affine", "Binary", "Cast", "Unary", "MeanBroadcast", "Convolve", "MedianFilter",
]
