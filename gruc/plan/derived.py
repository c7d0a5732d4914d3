"""Flags that follow other flags: ties and fixed products.

A planner's question often holds a relation between flags fixed while one of them moves: "the
largest GRU with ``I = H``" (``--tie input-size=output-size``), or "the largest batch at 1,600
tokens a step" (``--fixed-product batch-size*sequence-size=1600``).  Without the relation a
sweep plans the whole cross product and a find-max moves one flag alone; with it, the flags that
follow are *derived* for every configuration, in sweeps and in searches alike.

* A **tie** ``A=B``: B takes A's value.  Ties chain (``A=B``, ``B=C``) into groups of equal
  flags; each group has one *driver*, the flag whose values are given: A (the group's root),
  given, swept or left at its default — or the flag ``--find-max`` searches, whichever member
  that is (``--tie input-size=output-size --find-max output-size`` searches H and sets I to it).
  Giving values to a tied flag B (rather than to A) is refused, and so is giving two members of
  a group, tying a flag twice and a cycle: each would leave a flag with two values.
* A **fixed product** ``A*B=N`` (integer flags): exactly one factor is given, swept or
  searched, and the other is ``N`` divided by it.  A value that does not divide ``N`` has no
  configuration: a sweep skips it and says so; a search moves over the divisors of ``N`` only.

:func:`resolve` checks the relations against what a study gives and returns a
:class:`Derivation`, plain data a worker process unpickles, whose :meth:`Derivation.apply`
completes a configuration's flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from gruc.errors import GrucValueError


def flag_of(field: str) -> str:
    """The command-line spelling of a layer field (``pass_`` -> ``--pass``)."""
    return "--" + field.rstrip("_").replace("_", "-")


class NotAMultiple(GrucValueError):
    """A fixed product's driving factor does not divide the product: no configuration."""


@dataclass(frozen=True)
class Derivation:
    """The derived flags of one study, resolved (see :func:`resolve`)."""

    ties: tuple[tuple[str, str], ...] = ()
    """``(source, follower)`` pairs in the order they are applied (drivers first)."""
    products: tuple[tuple[str, str, int], ...] = ()
    """``(driver, derived, product)`` of each fixed product."""
    defaults: tuple[tuple[str, Any], ...] = ()
    """The model's default of each driver, for a driver no configuration gives."""

    @property
    def derived(self) -> tuple[str, ...]:
        """The flags whose values are derived, never given."""
        return (*(follower for _, follower in self.ties),
                *(derived for _, derived, _ in self.products))

    def apply(self, flags: dict[str, Any]) -> dict[str, Any]:
        """``flags`` with every derived flag set from its driver (a driver missing from
        ``flags`` has its default); :class:`NotAMultiple` where a fixed product's driver does not
        divide the product."""
        defaults, result = dict(self.defaults), dict(flags)
        for source, follower in self.ties:
            result[follower] = result[source] if source in result else defaults[source]
        for driver, derived, product in self.products:
            value = result[driver] if driver in result else defaults.get(driver)
            if not isinstance(value, int) or value < 1 or product % value:
                raise NotAMultiple(f"{flag_of(driver)} {value} does not divide the fixed "
                                   f"product {flag_of(driver)[2:]}*{flag_of(derived)[2:]}="
                                   f"{product}")
            result[derived] = product // value
        return result

    def domain(self, flag: str, start: int, limit: int) -> tuple[int, ...] | None:
        """The values a search of ``flag`` may take from ``start`` to ``limit``: the divisors
        of its fixed product there, or None (every integer) when it drives none."""
        for driver, _, product in self.products:
            if driver == flag:
                return tuple(d for d in range(max(start, 1), min(limit, product) + 1)
                             if product % d == 0)
        return None


def parse_tie(text: str) -> tuple[str, str]:
    """``A=B`` (flags as on the command line, with or without dashes) as two field names."""
    parts = [part.strip() for part in text.split("=")]
    if len(parts) != 2 or not all(parts):
        raise GrucValueError(f"--tie {text!r} must be FLAG=FLAG, e.g. input-size=output-size")
    return _field(parts[0]), _field(parts[1])


def parse_product(text: str) -> tuple[str, str, int]:
    """``A*B=N`` as two field names and the product."""
    factors, _, value = text.partition("=")
    names = [part.strip() for part in factors.split("*")]
    if len(names) != 2 or not all(names) or not value.strip():
        raise GrucValueError(f"--fixed-product {text!r} must be FLAG*FLAG=N, e.g. "
                             "batch-size*sequence-size=1600")
    try:
        product = int(value)
    except ValueError:
        raise GrucValueError(f"--fixed-product {text!r}: {value.strip()!r} is not an integer") \
            from None
    return _field(names[0]), _field(names[1]), product


def _field(text: str) -> str:
    return text.lstrip("-").replace("-", "_")


def check_relations(ties: Iterable[tuple[str, str]], products: Iterable[tuple[str, str, int]],
                    *, flags: Iterable[str], integer_flags: Iterable[str]
                    ) -> dict[str, list[str]]:
    """Refuse relations that are wrong whatever a study gives: an unknown flag, a flag tied to
    itself or twice, a cycle of ties, a product that is not a positive integer or relates a
    flag that is not an integer size, is tied, or is in another product.  Returns the tie
    groups: their members by root."""
    ties, known, integers = list(ties), set(flags), set(integer_flags)
    for name in [n for pair in ties for n in pair] + [n for p in products for n in p[:2]]:
        if name not in known:
            raise GrucValueError(f"{flag_of(name)} is not a flag of this layer's plans; a tie or "
                                 "a fixed product relates two of its flags")
    source = _sources(ties)
    groups: dict[str, list[str]] = {}
    for name in sorted({n for pair in ties for n in pair}):
        groups.setdefault(_root(name, source), []).append(name)
    seen: set[str] = set()
    for a, b, product in products:
        text = _product_text(a, b, product)
        if isinstance(product, bool) or not isinstance(product, int) or product < 1:
            raise GrucValueError(f"{text}: the product must be an integer >= 1")
        if a == b:
            raise GrucValueError(f"{text} multiplies a flag by itself")
        for name in (a, b):
            if name not in integers:
                raise GrucValueError(f"{text}: {flag_of(name)} is not an integer size flag "
                                     f"(these are: {', '.join(map(flag_of, sorted(integers)))})")
            if name in source or name in groups:
                raise GrucValueError(f"{text}: {flag_of(name)} is also tied; a factor may not "
                                     "be")
            if name in seen:
                raise GrucValueError(f"{text}: {flag_of(name)} is in two fixed products")
            seen.add(name)
    return groups


def resolve(ties: Iterable[tuple[str, str]], products: Iterable[tuple[str, str, int]], *,
            flags: Iterable[str], integer_flags: Iterable[str], given: Iterable[str],
            searched: str | None, defaults: dict[str, Any]) -> Derivation:
    """The :class:`Derivation` of ``ties`` (``(A, B)``: B takes A's value) and ``products``
    (``(A, B, N)``: A * B = N) for a study that gives the flags ``given`` (fixed or swept) and
    searches ``searched``; anything that would leave a flag with no value or two (see the
    module and :func:`check_relations`) is a GrucValueError naming the flags.  ``flags``: the
    layer's flags; ``integer_flags``: those a fixed product may relate; ``defaults``: each
    flag's default."""
    ties, products, given = list(ties), list(products), set(given)
    groups = check_relations(ties, products, flags=flags, integer_flags=integer_flags)
    source = _sources(ties)
    applied, driver_defaults = [], {}
    for root, members in groups.items():
        driving = [m for m in members if m in given or m == searched]
        if len(driving) > 1:
            raise GrucValueError(f"tied flags {' and '.join(map(flag_of, driving))} are both "
                                 "given or searched; they take one value: give one of them")
        if driving and driving[0] != root and driving[0] != searched:
            raise GrucValueError(f"{flag_of(driving[0])} is tied to "
                                 f"{flag_of(source[driving[0]])} (it takes its value): give the "
                                 f"values to {flag_of(root)} instead")
        driver = driving[0] if driving else root
        if not driving:
            driver_defaults[driver] = defaults.get(driver)
        applied += _spread(driver, members, source)
    resolved = []
    for a, b, product in products:
        driving = [n for n in (a, b) if n in given or n == searched]
        if len(driving) != 1:
            state = "both given" if driving else "neither given nor searched"
            raise GrucValueError(f"{_product_text(a, b, product)}: {flag_of(a)} and "
                                 f"{flag_of(b)} are {state}; give or search exactly one, and the "
                                 "other is derived")
        resolved.append((driving[0], b if driving[0] == a else a, product))
    return Derivation(tuple(applied), tuple(resolved), tuple(driver_defaults.items()))


def _product_text(a: str, b: str, product: Any) -> str:
    return f"--fixed-product {flag_of(a)[2:]}*{flag_of(b)[2:]}={product}"


def _sources(ties: list[tuple[str, str]]) -> dict[str, str]:
    """Each tied flag's source; a flag tied to itself or twice is refused."""
    source: dict[str, str] = {}
    for a, b in ties:
        if a == b:
            raise GrucValueError(f"--tie {flag_of(a)[2:]}={flag_of(b)[2:]} ties a flag to itself")
        if b in source:
            raise GrucValueError(f"{flag_of(b)} is tied twice ({flag_of(source[b])[2:]}="
                                 f"{flag_of(b)[2:]} and {flag_of(a)[2:]}={flag_of(b)[2:]}); tie "
                                 "it to one flag")
        source[b] = a
    return source


def _root(name: str, source: dict[str, str]) -> str:
    """The flag at the head of ``name``'s chain of ties; a cycle is refused, naming it."""
    chain = [name]
    while chain[-1] in source:
        nxt = source[chain[-1]]
        if nxt in chain:
            loop = chain[chain.index(nxt):] + [nxt]
            raise GrucValueError("ties form a cycle (" + " <- ".join(map(flag_of, loop))
                                 + "): one flag must lead")
        chain.append(nxt)
    return chain[-1]


def _spread(driver: str, members: list[str], source: dict[str, str]) -> list[tuple[str, str]]:
    """``(from, to)`` pairs giving every member of a tie group the driver's value, each after
    the one it copies from (a tree walked outward from the driver, edges in either
    direction)."""
    neighbours: dict[str, list[str]] = {m: [] for m in members}
    for follower, lead in source.items():
        if follower in neighbours:
            neighbours[follower].append(lead)
            neighbours[lead].append(follower)
    order, reached = [], {driver}
    frontier = [driver]
    while frontier:
        current = frontier.pop(0)
        for other in sorted(neighbours[current]):
            if other not in reached:
                reached.add(other)
                order.append((current, other))
                frontier.append(other)
    return order
