r"""A regex from adapter_config.json (`target_modules`, or a `rank_pattern` / `alpha_pattern` key):
checked for cost before it is compiled, and matched under a time budget.

PEFT matches a string `target_modules` with `re.fullmatch` against each module path, and a pattern
key as `re.match(rf"(.*\.)?({key})$", path)`. Matching
needs a timeout, which only the `regex` module has, and `regex.compile` unrolls repeats:
`((a{1000}){1000}){1000}`, 23 characters, asks for gigabytes, and nested `+` grow just as
fast. So the pattern is first parsed with `re`'s own parser (PEFT's grammar; cheap, it expands
nothing) and its shape is bounded: how many pattern items its repeats expand to, and how deeply
repeats that unroll are nested. Patterns within both bounds compile in about a millisecond and
well under a MiB (measured with random patterns at the limits).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
# re is a package at runtime; its stub is one module, without these private parts.
from re import _constants as sre  # type: ignore[attr-defined]  # the parser's opcodes; no public name
from re import _parser as sre_parse  # type: ignore[attr-defined]  # the grammar PEFT's re.fullmatch uses

import regex

from registry.errors import Unprocessable

MAX_CHARS = 256
MAX_EXPANDED_ITEMS = 1000  # pattern items once every repeat count is multiplied out
MAX_UNROLLED_NESTING = 2  # repeats with a minimum, or a count above one, inside each other
MAX_UNBOUNDED_REPEATS = 3  # *, + and {n,} in one pattern: re tries every way they share a path
MATCH_TIMEOUT_S = 0.1  # a module path is short; a pattern that needs longer is hostile
# CPU seconds of the checking thread for all the matches of one upload together, so that a busy
# machine does not refuse an honest adapter: 64 rank and 64 alpha keys over 560 modules (an
# 80-layer all-linear LoRA) take about 0.3 s here.
MATCH_BUDGET_S = 5.0
REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)
SIMPLER = r"Use a list of module names, or a simple regex such as '.*\.(q_proj|v_proj)'."

Refuse = Callable[..., Unprocessable]


def check(pattern: str, refuse: Refuse, what: str = "target_modules", *, key: bool = False) -> None:
    r"""Refuse a pattern PEFT could not use, or one that would cost too much to compile or to
    match with `re`. `what` names it in the messages; `key`: a rank_pattern / alpha_pattern key,
    which peft compiles as `(.*\.)?(key)$` (peft_form) and ModuleScaling joins with the others."""
    if len(pattern) > MAX_CHARS:
        raise refuse(f"{what} regex is longer than {MAX_CHARS} characters", hint=SIMPLER)
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError) as error:
        raise refuse(f"{what} is not a valid regex ({str(error)[:200]})", hint=SIMPLER) from None
    items, nesting = _shape(list(parsed), refuse, what)
    unbounded = _unbounded_repeats(list(parsed))
    if items > MAX_EXPANDED_ITEMS:
        reason = f"its repeat counts multiply out to more than {MAX_EXPANDED_ITEMS} pattern items"
    elif nesting > MAX_UNROLLED_NESTING:
        reason = f"it nests repeats {nesting} deep (the limit is {MAX_UNROLLED_NESTING}; * and ? do not count)"
    elif _unbounded_inside_repeat(list(parsed)):
        # PEFT matches with `re`, which has no timeout, in the evaluation worker too: `(.*)*x`
        # backtracks exponentially there.
        reason = "it repeats a group that itself holds an unbounded repeat (such as (.*)*)"
    elif unbounded > MAX_UNBOUNDED_REPEATS:
        # `re` tries every way they can share one module path: `.*` 9 times takes seconds.
        reason = f"it has {unbounded} unbounded repeats (*, + or {{n,}}; at most {MAX_UNBOUNDED_REPEATS})"
    elif key and (parsed.state.groupdict or _has_group_reference(list(parsed))):
        reason = "a pattern key may not name groups or refer back to them"
    else:
        reason = ""
    if reason:
        raise refuse(f"{what} regex is too complex to compile safely: {reason}",
                     hint="Use a list of module names, or a regex without large or nested repeat "
                          r"counts, such as '.*\.(q_proj|v_proj)'.")
    for compile_, form, error_type in ((re.compile, peft_form(pattern) if key else pattern, re.error),
                                       (regex.compile, pattern, regex.error)):
        try:  # as peft compiles it (with re), and as the registry matches it (with regex)
            compile_(form)
        except (error_type, RecursionError, OverflowError) as error:
            raise refuse(f"{what} is not a valid regex as peft uses it ({str(error)[:200]})",
                         hint=SIMPLER) from None


def peft_form(key: str) -> str:
    """A pattern key as peft's get_pattern_key compiles it (with re.match)."""
    return rf"(.*\.)?({key})$"


def deadline() -> float:
    """The end of one upload's matching budget, in this thread's CPU time; several matchers of
    the same check may share it."""
    return time.thread_time() + MATCH_BUDGET_S


class Matcher:
    """re.fullmatch semantics, with a timeout per path and a budget for all of them."""

    def __init__(self, pattern: str, refuse: Refuse, *, what: str = "target_modules",
                 ends: float | None = None) -> None:
        self.pattern, self.refuse, self.what = regex.compile(pattern), refuse, what
        self.deadline = deadline() if ends is None else ends

    def __call__(self, module_path: str) -> bool:
        return self.fullmatch(module_path) is not None

    def fullmatch(self, module_path: str) -> regex.Match | None:
        left = self.deadline - time.thread_time()
        try:
            if left <= 0:
                raise TimeoutError
            return self.pattern.fullmatch(module_path, timeout=min(MATCH_TIMEOUT_S, left))
        except TimeoutError:
            raise self.refuse(f"{self.what} is a regex too slow to evaluate", hint=SIMPLER) from None


def _shape(items: list, refuse: Refuse, what: str) -> tuple[int, int]:
    """(pattern items after multiplying out repeat counts, nesting depth of unrolled repeats)."""
    total = nesting = 0
    for op, value in items:
        if op in REPEATS:
            low, high, body = value
            inner, depth = _shape(list(body), refuse, what)
            copies = _copies(low, high)
            total += inner * copies
            nesting = max(nesting, depth + (copies > 1))
        else:
            _refuse_other_dialect(op, value, refuse, what)
            total += 1
            for body in _bodies(op, value):
                inner, depth = _shape(list(body), refuse, what)
                total += inner
                nesting = max(nesting, depth)
        total = min(total, MAX_EXPANDED_ITEMS + 1)  # past the limit the exact count is moot
    return total, nesting


def _unbounded_repeats(items: list) -> int:
    count = 0
    for op, value in items:
        if op in REPEATS:
            low, high, body = value
            count += (high == sre.MAXREPEAT) + _unbounded_repeats(list(body))
        else:
            count += sum(_unbounded_repeats(list(body)) for body in _bodies(op, value))
    return count


def _has_group_reference(items: list) -> bool:
    for op, value in items:
        if op in (sre.GROUPREF, sre.GROUPREF_EXISTS, sre.GROUPREF_IGNORE):
            return True
        bodies = [value[2]] if op in REPEATS else _bodies(op, value)
        if any(_has_group_reference(list(body)) for body in bodies):
            return True
    return False


def _unbounded_inside_repeat(items: list, inside: bool = False) -> bool:
    """Whether an unbounded repeat (*, +, {n,}) sits inside a repeat that may match its body
    more than once: the shape of catastrophic backtracking."""
    for op, value in items:
        if op in REPEATS:
            low, high, body = value
            if inside and high == sre.MAXREPEAT:
                return True
            if _unbounded_inside_repeat(list(body), inside or high > 1):
                return True
        else:
            for body in _bodies(op, value):
                if _unbounded_inside_repeat(list(body), inside):
                    return True
    return False


def _copies(low: int, high: int) -> int:
    """How many copies of its body `regex` may make of a repeat: `*` and `?` none, `+` two."""
    if high == sre.MAXREPEAT:
        return low + 1 if low else 1
    return high


def _bodies(op, value) -> list:
    if op is sre.SUBPATTERN:
        return [value[3]]
    if op is sre.BRANCH:
        return list(value[1])
    if op in (sre.ASSERT, sre.ASSERT_NOT):
        return [value[1]]
    if op is sre.ATOMIC_GROUP:
        return [value]
    if op is sre.GROUPREF_EXISTS:
        return [body for body in value[1:] if body is not None]
    return []


def _refuse_other_dialect(op, value, refuse: Refuse, what: str) -> None:
    """`re` reads these as literals; `regex` reads them as fuzzy matching or POSIX classes."""
    if op is sre.LITERAL and value in (ord("{"), ord("}")):
        raise refuse(f"{what} regex has a '{{' or '}}' that is not a repeat count such as {{2}}",
                     hint="Module names hold no braces: remove them. " + SIMPLER)
    if op is sre.IN and (sre.LITERAL, ord("[")) in value:
        raise refuse(f"{what} regex has '[' inside a character set",
                     hint="Write a character set as [abc] without a nested [. " + SIMPLER)

