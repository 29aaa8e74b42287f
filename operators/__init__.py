"""Operator base classes and the built-in operator library.

Kernels are pure numpy (numpy in, numpy out); operator classes hold planning (output shape,
parallelization, mapping functions, supported lineage modes). Families:

- :mod:`operators.elementwise`: :class:`Unary`, :class:`Binary`, :class:`Scalar`,
  :class:`Affine`, :class:`Cast`, :class:`Copy`, :class:`Logistic`, :class:`Classify`;
- :mod:`operators.merge`: :class:`Where`, :class:`MaskReplace`;
- :mod:`operators.slicing`: :class:`Subarray`, :class:`Transpose`;
- :mod:`operators.reshape`: :class:`Reshape`; :mod:`operators.concat`: :class:`Concatenate`;
- :mod:`operators.reductions`: :class:`Reduce`, :class:`MeanBroadcast`;
- :mod:`operators.stencils`: :class:`Convolve`, :class:`MedianFilter`;
- :mod:`operators.linalg`: :class:`MatMul`.

:mod:`operators.udf` turns a user's numpy function into an operator with one decorator
(elementwise, stencil, rows or columns, whole array, black box, or data-dependent lineage
recorded per chunk).
"""

from operators.base import (
    AllToAllOperator, CellMapping, ElementwiseOperator, MappingOperator, StencilOperator, UDF,
)
from operators.concat import Concatenate
from operators.elementwise import (Affine, Binary, Cast, Classify, Copy, Logistic, Scalar,
                                   Unary)
from operators.linalg import MatMul
from operators.merge import MaskReplace, Where
from operators.reductions import MeanBroadcast, Reduce
from operators.reshape import Reshape
from operators.slicing import Subarray, Transpose
from operators.stencils import Convolve, MedianFilter
from subzero.operator import BLOCKWISE, ELEMENTWISE, GLOBAL, Operator, Parallelism, stencil

__all__ = [
    "BLOCKWISE", "ELEMENTWISE", "GLOBAL", "AllToAllOperator", "CellMapping", "ElementwiseOperator",
    "MappingOperator", "Operator", "Parallelism", "StencilOperator", "UDF", "stencil",
    "Affine", "Binary", "Cast", "Classify", "Copy", "Logistic", "Scalar", "Unary",
    "MaskReplace", "Where", "Subarray", "Transpose", "Reshape", "Concatenate",
    "MeanBroadcast", "Reduce", "Convolve", "MedianFilter", "MatMul",
]
