"""Arithmetic, statistics and unit conversion."""

from __future__ import annotations

import ast
import cmath
import math
import operator
import statistics
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from toolcat import tool

__toolcat__ = {"toolkit": "math", "version": "1.0.0", "tags": ["math"]}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS = {
    name: getattr(math, name)
    for name in [
        "sqrt",
        "exp",
        "log",
        "log10",
        "log2",
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "atan2",
        "degrees",
        "radians",
        "floor",
        "ceil",
        "factorial",
        "gcd",
        "hypot",
    ]
}
_FUNCTIONS.update({"abs": abs, "round": round, "min": min, "max": max})
_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}


MAX_DIGITS = 4300
"""Most decimal digits an integer result or intermediate may have (Python's own limit for
turning integers into text, so every result can be printed)."""
MAX_BITS = int((MAX_DIGITS - 1) * math.log2(10))
MAX_FACTORIAL = 1000


def _check(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_BITS:
        raise ValueError(f"result has more than {MAX_DIGITS} digits")
    return value


def _power(left: Any, right: Any) -> Any:
    if abs(right) > 10_000:
        raise ValueError("exponent too large (limit 10000)")
    whole = isinstance(left, int) and isinstance(right, int)
    if whole and right > 0 and abs(left) > 1 and right * math.log10(abs(left)) > MAX_DIGITS:
        raise ValueError(f"result has more than {MAX_DIGITS} digits")
    return operator.pow(left, right)


def _multiply(left: Any, right: Any) -> Any:
    whole = isinstance(left, int) and isinstance(right, int)
    if whole and left.bit_length() + right.bit_length() > MAX_BITS + 1:
        raise ValueError(f"result has more than {MAX_DIGITS} digits")
    return operator.mul(left, right)


def _factorial(n: Any) -> int:
    if isinstance(n, (int, float)) and n > MAX_FACTORIAL:
        raise ValueError(f"factorial is limited to n <= {MAX_FACTORIAL}")
    return math.factorial(n)


_BINARY[ast.Pow] = _power
_BINARY[ast.Mult] = _multiply
_FUNCTIONS["factorial"] = _factorial


def _describe(node: ast.AST) -> str:
    """An element of an expression in words, whole (never a cut-off AST dump)."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name):
            if node.func.id in _FUNCTIONS and node.keywords:
                return f"keyword arguments to {node.func.id}()"
            return f"function {node.func.id!r} (known: {', '.join(sorted(_FUNCTIONS))})"
        if isinstance(node.func, ast.Attribute):
            return "attribute access (a.b)"
        return "a call of something other than a named function"
    if isinstance(node, ast.Name):
        return f"name {node.id!r} (known constants: {', '.join(_CONSTANTS)})"
    if isinstance(node, ast.Constant):
        return f"{type(node.value).__name__} constant (only numbers are allowed)"
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        return f"operator {type(node.op).__name__}"
    return {
        ast.Attribute: "attribute access (a.b)",
        ast.Subscript: "indexing (a[b])",
        ast.Compare: "comparison",
        ast.BoolOp: "and/or",
        ast.Lambda: "lambda",
        ast.IfExp: "if/else",
    }.get(type(node), type(node).__name__)


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        return _check(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _check(_FUNCTIONS[node.func.id](*(_evaluate(a) for a in node.args)))
    raise ValueError(f"unsupported expression element: {_describe(node)}")


@tool(
    tags=["read-only"],
    idempotent=True,
    examples=["what is 17 percent of 240", "compute 2 to the power of 10"],
)
def calculate(expression: str) -> float | int:
    """Evaluate an arithmetic expression safely (+ - * / // % **, parentheses, and functions such as sqrt, log, sin, round).

    Args:
        expression: For example '(3 + 4) * sqrt(16)'.
    """
    if len(expression) > 1000:
        raise ValueError("expression longer than 1000 characters")
    try:
        tree = ast.parse(expression.replace("^", "**"), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not an arithmetic expression: {e.msg}") from None
    except (RecursionError, MemoryError):
        raise ValueError("expression nested too deeply") from None
    try:
        result = _evaluate(tree)
    except RecursionError:
        raise ValueError("expression nested too deeply") from None
    except OverflowError as e:
        raise ValueError(f"number too large: {e}") from None
    if isinstance(result, float) and not math.isfinite(result):
        raise ValueError(f"the result is not a finite number ({result})")
    return int(result) if isinstance(result, float) and result.is_integer() else result


# Factors to a base unit per dimension.
_UNITS: dict[str, tuple[str, float]] = {}
for _dimension, _table in {
    "length": {
        "m": 1,
        "km": 1000,
        "cm": 0.01,
        "mm": 0.001,
        "mi": 1609.344,
        "yd": 0.9144,
        "ft": 0.3048,
        "in": 0.0254,
        "nmi": 1852,
    },
    "mass": {"kg": 1, "g": 0.001, "mg": 1e-6, "t": 1000, "lb": 0.45359237, "oz": 0.028349523125},
    "volume": {
        "l": 1,
        "ml": 0.001,
        "m3": 1000,
        "gal": 3.785411784,
        "qt": 0.946352946,
        "cup": 0.2365882365,
        "floz": 0.0295735295625,
    },
    "time": {"s": 1, "ms": 0.001, "min": 60, "h": 3600, "day": 86400, "week": 604800},
    "speed": {"m/s": 1, "km/h": 1 / 3.6, "mph": 0.44704, "kn": 1852 / 3600},
    "data": {
        "B": 1,
        "KB": 1e3,
        "MB": 1e6,
        "GB": 1e9,
        "TB": 1e12,
        "KiB": 1024,
        "MiB": 1024**2,
        "GiB": 1024**3,
        "TiB": 1024**4,
    },
}.items():
    for _unit, _factor in _table.items():
        _UNITS[_unit] = (_dimension, float(_factor))
_TEMPERATURES = {"degC", "degF", "K"}


def _to_kelvin(value: float, unit: str) -> float:
    return {"degC": value + 273.15, "degF": (value - 32) * 5 / 9 + 273.15, "K": value}[unit]


def _from_kelvin(value: float, unit: str) -> float:
    return {"degC": value - 273.15, "degF": (value - 273.15) * 9 / 5 + 32, "K": value}[unit]


@tool(
    tags=["read-only"],
    idempotent=True,
    examples=["how many miles is 10 kilometers", "fahrenheit to celsius"],
)
def convert_units(value: float, from_unit: str, to_unit: str) -> dict[str, Any]:
    """Convert a quantity between units of length, mass, volume, time, speed, data size or temperature.

    Args:
        value: The quantity to convert.
        from_unit: Unit to convert from, e.g. km, lb, degF, GiB.
        to_unit: Unit to convert to, e.g. mi, kg, degC, MB.
    """
    if from_unit in _TEMPERATURES and to_unit in _TEMPERATURES:
        result = _from_kelvin(_to_kelvin(value, from_unit), to_unit)
    else:
        known = ", ".join(sorted([*_UNITS, *_TEMPERATURES]))
        for unit in (from_unit, to_unit):
            if unit not in _UNITS:
                raise ValueError(f"unknown unit {unit!r}; known units: {known}")
        (dim_from, factor_from), (dim_to, factor_to) = _UNITS[from_unit], _UNITS[to_unit]
        if dim_from != dim_to:
            raise ValueError(f"cannot convert {dim_from} ({from_unit}) to {dim_to} ({to_unit})")
        result = value * factor_from / factor_to
    return {"value": round(result, 10), "unit": to_unit, "from": f"{value:g} {from_unit}"}


@tool(
    tags=["read-only"],
    idempotent=True,
    examples=["average and standard deviation of these values"],
)
def describe_numbers(
    numbers: Annotated[list[float], Field(min_length=1, description="The values to summarise.")],
) -> dict[str, Any]:
    """Summary statistics of a list of numbers - count, mean, median, mode, standard deviation, min, max and quartiles."""
    ordered = sorted(numbers)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
    return {
        "count": len(ordered),
        "mean": statistics.fmean(ordered),
        "median": statistics.median(ordered),
        "mode": statistics.multimode(ordered)[:5],
        "stdev": statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
        "min": ordered[0],
        "max": ordered[-1],
        "q1": quartiles[0],
        "q3": quartiles[2],
    }


@tool(tags=["read-only"], idempotent=True, examples=["by how much did revenue grow"])
def percent_change(old: float, new: float) -> dict[str, Any]:
    """Percentage change, difference and ratio between an old and a new value.

    Args:
        old: The earlier value.
        new: The later value.
    """
    return {
        "difference": new - old,
        "percent_change": None if old == 0 else round((new - old) / abs(old) * 100, 6),
        "ratio": None if old == 0 else new / old,
    }


@tool(
    tags=["read-only"],
    idempotent=True,
    defer_loading=True,
    examples=["roots of x squared minus 5x plus 6"],
)
def solve_quadratic(a: float, b: float, c: float) -> dict[str, Any]:
    """Real or complex roots of a quadratic equation a*x^2 + b*x + c = 0.

    Args:
        a: Coefficient of x squared (not zero).
        b: Coefficient of x.
        c: Constant term.
    """
    if a == 0:
        raise ValueError("a must not be 0: that is a linear equation")
    discriminant = b * b - 4 * a * c
    root = cmath.sqrt(discriminant)
    roots = [(-b + root) / (2 * a), (-b - root) / (2 * a)]
    if discriminant >= 0:
        return {"discriminant": discriminant, "roots": sorted(r.real for r in roots)}
    return {"discriminant": discriminant, "roots": [f"{r.real:g}{r.imag:+g}i" for r in roots]}


@tool(
    tags=["read-only"],
    idempotent=True,
    defer_loading=True,
    examples=["is 97 a prime number", "factorize 360"],
)
def prime_factors(
    n: Annotated[int, Field(ge=1, le=10**15, description="The number to factor.")],
) -> dict[str, Any]:
    """Factor a positive integer into primes and say whether it is prime."""
    factors, rest, divisor = [], n, 2
    while divisor * divisor <= rest:
        while rest % divisor == 0:
            factors.append(divisor)
            rest //= divisor
        divisor += 1 if divisor == 2 else 2
    if rest > 1:
        factors.append(rest)
    return {"n": n, "factors": factors, "is_prime": n > 1 and factors == [n]}
