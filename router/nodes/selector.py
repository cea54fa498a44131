"""JMS 2.0 message selectors (the SQL-92 subset of javax.jms.Message), compiled for AMQP messages.

    selector   := or ;  or := and {OR and} ;  and := not {AND not} ;  not := NOT not | predicate
    predicate  := sum [ (= | <> | < | > | <= | >=) sum | [NOT] BETWEEN sum AND sum
                      | [NOT] IN ( literal {, literal} ) | [NOT] LIKE 'pattern' [ESCAPE 'c']
                      | IS [NOT] NULL ]
    sum := product {(+|-) product} ;  product := unary {(*|/) unary} ;  unary := (+|-) unary | atom
    atom := identifier | 'string' | number | TRUE | FALSE | ( selector )

Keywords are case-insensitive, identifiers are not. A selector is compiled once, when a receiver
attaches, into closures over MessageFacts, so every mistake is found then, as one line naming its
position (1-based), and nothing raises while messages are tested.

Semantics are the JMS specification's: SQL's three-valued logic, where an absent identifier is
NULL, anything compared with or computed from NULL is unknown, and a message is selected only
when the whole selector is TRUE. Comparing values of different types (or ordering strings or
booleans) is FALSE, not an error; arithmetic on non-numbers and division by zero are unknown.
Integers divide as Java's longs do (truncating); int with float gives float.

Identifiers, as Qpid and Artemis map JMS onto AMQP:

- JMSMessageID, JMSCorrelationID: properties message-id, correlation-id (strings and ulongs;
  uuid and binary ids are NULL);
- JMSType: the x-opt-jms-type message annotation Qpid JMS sends, else properties subject;
- JMSPriority: header priority (4 when absent); JMSDeliveryMode: 'PERSISTENT' if header durable,
  else 'NON_PERSISTENT';
- JMSTimestamp, JMSExpiration: properties creation-time, absolute-expiry-time in milliseconds
  (NULL when absent, where JMS would say 0);
- ``amqp.<field>``, the names Qpid's selector-filter puts on the wire: amqp.message_id,
  amqp.correlation_id, amqp.subject, amqp.priority, amqp.delivery_mode, amqp.creation_time,
  amqp.absolute_expiry_time, amqp.to, amqp.reply_to, and likewise amqp.user_id,
  amqp.content_type, amqp.group_id;
- anything else is an application property. Identifiers may hold '.' after their first
  character, as ActiveMQ's do, because AMQP property names often do.

Numbers are Java's literals: decimal, octal (leading 0) and hex (0x) integers with an optional L,
and decimals or exponents with an optional F or D.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Literal

from router.nodes.facts import MessageFacts, Scalar, scalar

Eval = Callable[[MessageFacts], Scalar]
Kind = Literal["bool", "num", "str", "any"]
"""What an expression is known to yield before any message is seen; "any" for identifiers."""

KEYWORDS = frozenset(
    ("AND", "BETWEEN", "ESCAPE", "FALSE", "IN", "IS", "LIKE", "NOT", "NULL", "OR", "TRUE")
)
_NUMBER = re.compile(
    r"(?P<hex>0[xX][0-9a-fA-F]+[lL]?)"
    r"|(?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?|\d+(?:[eE][+-]?\d+[fFdD]?|[fFdD]))"
    r"|(?P<int>\d+[lL]?)",
    re.ASCII,
)
_DIGITS = frozenset("0123456789")
_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",")
_WHITESPACE = " \t\n\r\f"


class SelectorError(ValueError):
    """A selector outside the grammar; the message is one line naming the position."""


class Selector:
    """A compiled selector: which messages a receiver or binding takes."""

    __slots__ = ("_test", "text")

    def __init__(self, text: str, test: Eval) -> None:
        self.text = text
        self._test = test

    def matches(self, facts: MessageFacts) -> bool:
        """Only TRUE selects: FALSE and unknown both leave the message out."""
        return self._test(facts) is True

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"


def compile_selector(text: str) -> Selector:
    """`text` compiled; SelectorError if it is not a selector. An empty (or blank) selector
    selects every message, as JMS says it means no selector."""
    if not text.strip(_WHITESPACE):
        return Selector(text, lambda facts: True)
    parser = _Parser(_tokens(text))
    test, kind = parser.disjunction()
    parser.expect_end()
    if kind not in ("bool", "any"):
        raise _error(0, f"the selector is {_KIND_NAMES[kind]}, not a condition")
    return Selector(text, test)


# --- tokens ---------------------------------------------------------------------------------

TokenKind = Literal["num", "str", "id", "kw", "op", "end"]


class _Token:
    __slots__ = ("kind", "pos", "text", "value")

    def __init__(self, kind: TokenKind, text: str, pos: int, value: Scalar = None) -> None:
        self.kind = kind
        self.text = text
        """The keyword in upper case, the operator, or the source text."""
        self.pos = pos
        self.value = value

    def shown(self) -> str:
        return "the end" if self.kind == "end" else repr(self.text)


def _error(pos: int, problem: str) -> SelectorError:
    return SelectorError(f"selector error at position {pos + 1}: {problem}")


def _identifier_start(ch: str) -> bool:
    return ch.isalpha() or ch in "_$"


def _identifier_part(ch: str) -> bool:
    return ch.isalnum() or ch in "_$."


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i == n:
            tokens.append(_Token("end", "", i))
            return tokens
        ch = text[i]
        if ch == "'":
            i = _string(text, i, tokens)
        elif ch in _DIGITS or (ch == "." and text[i + 1 : i + 2] in _DIGITS):
            i = _number(text, i, tokens)
        elif _identifier_start(ch):
            end = i + 1
            while end < n and _identifier_part(text[end]):
                end += 1
            word = text[i:end]
            if word.upper() in KEYWORDS:
                tokens.append(_Token("kw", word.upper(), i))
            else:
                tokens.append(_Token("id", word, i))
            i = end
        else:
            op = next((op for op in _OPERATORS if text.startswith(op, i)), None)
            if op is None:
                raise _error(i, f"unexpected character {ch!r}")
            tokens.append(_Token("op", op, i))
            i += len(op)


def _string(text: str, start: int, tokens: list[_Token]) -> int:
    """Reads the literal at `start`, where '' stands for one quote; returns where it ends."""
    parts: list[str] = []
    i = start + 1
    while True:
        close = text.find("'", i)
        if close < 0:
            raise _error(start, "unterminated string literal")
        parts.append(text[i:close])
        if text.startswith("''", close):
            parts.append("'")
            i = close + 2
        else:
            tokens.append(_Token("str", text[start : close + 1], start, "".join(parts)))
            return close + 1


def _number(text: str, start: int, tokens: list[_Token]) -> int:
    match = _NUMBER.match(text, start)
    assert match is not None  # _tokens calls this at a digit, or '.' and a digit
    end = match.end()
    if end < len(text) and _identifier_part(text[end]):
        raise _error(start, f"malformed number {text[start : end + 1]!r}")
    literal = match.group()
    value: int | float
    if match.lastgroup == "hex":
        value = int(literal.rstrip("lL"), 16)
    elif match.lastgroup == "float":
        value = float(literal.rstrip("fFdD"))
    else:
        digits = literal.rstrip("lL")
        octal = len(digits) > 1 and digits.startswith("0")
        try:
            value = int(digits, 8 if octal else 10)
        except ValueError:
            raise _error(start, f"malformed octal number {literal!r}") from None
    tokens.append(_Token("num", literal, start, value))
    return end


# --- evaluation -----------------------------------------------------------------------------


def _is_number(value: Scalar) -> bool:
    return type(value) is int or type(value) is float


def _truth(value: Scalar) -> bool | None:
    """A condition's value: TRUE, FALSE, or unknown for NULL and for anything not boolean."""
    return value if isinstance(value, bool) else None


def _and(left: Eval, right: Eval) -> Eval:
    def test(facts: MessageFacts) -> Scalar:
        a = _truth(left(facts))
        if a is False:
            return False
        b = _truth(right(facts))
        if b is False:
            return False
        return None if a is None or b is None else True

    return test


def _or(left: Eval, right: Eval) -> Eval:
    def test(facts: MessageFacts) -> Scalar:
        a = _truth(left(facts))
        if a is True:
            return True
        b = _truth(right(facts))
        if b is True:
            return True
        return None if a is None or b is None else False

    return test


def _not(inner: Eval) -> Eval:
    def test(facts: MessageFacts) -> Scalar:
        value = _truth(inner(facts))
        return None if value is None else not value

    return test


def _alike(a: Scalar, b: Scalar) -> bool:
    """Whether JMS compares `a` with `b` at all: values of one type, or two numbers."""
    return type(a) is type(b) or (_is_number(a) and _is_number(b))


def _equal(a: Scalar, b: Scalar) -> bool | None:
    if a is None or b is None:
        return None
    return _alike(a, b) and a == b


def _not_equal(a: Scalar, b: Scalar) -> bool | None:
    if a is None or b is None:
        return None
    return _alike(a, b) and a != b


def _ordering(compare: Callable[[float, float], bool]) -> Callable[[Scalar, Scalar], bool | None]:
    def order(a: Scalar, b: Scalar) -> bool | None:
        if a is None or b is None:
            return None
        if _is_number(a) and _is_number(b):
            return compare(a, b)  # type: ignore[arg-type]
        return False

    return order


_COMPARISONS: dict[str, Callable[[Scalar, Scalar], bool | None]] = {
    "=": _equal,
    "<>": _not_equal,
    "<": _ordering(operator.lt),
    ">": _ordering(operator.gt),
    "<=": _ordering(operator.le),
    ">=": _ordering(operator.ge),
}


def _divide(a: float, b: float) -> float | None:
    if b == 0:
        return None
    if type(a) is int and type(b) is int:
        quotient = abs(a) // abs(b)  # Java truncates toward zero, Python's // floors
        return quotient if (a < 0) == (b < 0) else -quotient
    return a / b


_ARITHMETIC: dict[str, Callable[[float, float], float | None]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": _divide,
}


def _binary(op: Callable[[Scalar, Scalar], Scalar], left: Eval, right: Eval) -> Eval:
    return lambda facts: op(left(facts), right(facts))


def _arithmetic(op: Callable[[float, float], float | None]) -> Callable[[Scalar, Scalar], Scalar]:
    def compute(a: Scalar, b: Scalar) -> Scalar:
        if _is_number(a) and _is_number(b):
            return op(a, b)  # type: ignore[arg-type]
        return None

    return compute


def _negate(inner: Eval) -> Eval:
    def compute(facts: MessageFacts) -> Scalar:
        value = inner(facts)
        return -value if _is_number(value) else None  # type: ignore[operator]

    return compute


def _between(value: Eval, low: Eval, high: Eval) -> Eval:
    above = _binary(_COMPARISONS[">="], value, low)
    below = _binary(_COMPARISONS["<="], value, high)
    return _and(above, below)


def _in(value: Eval, options: tuple[Scalar, ...]) -> Eval:
    def test(facts: MessageFacts) -> Scalar:
        v = value(facts)
        if v is None:
            return None
        return any(_equal(v, option) for option in options)

    return test


def _like(value: Eval, pattern: re.Pattern[str]) -> Eval:
    def test(facts: MessageFacts) -> Scalar:
        v = value(facts)
        if v is None:
            return None
        return isinstance(v, str) and pattern.fullmatch(v) is not None

    return test


def _is_null(value: Eval) -> Eval:
    return lambda facts: value(facts) is None


def _constant(value: Scalar) -> Eval:
    return lambda facts: value


# --- identifiers ----------------------------------------------------------------------------


def _jms_type(facts: MessageFacts) -> Scalar:
    annotated = facts.annotations.get("x-opt-jms-type")
    return annotated if isinstance(annotated, str) else facts.subject


def _delivery_mode(facts: MessageFacts) -> Scalar:
    return "PERSISTENT" if facts.durable else "NON_PERSISTENT"


def _field(name: str) -> Eval:
    get = operator.attrgetter(name)
    return lambda facts: scalar(get(facts))


_AMQP_FIELDS = (
    "message_id",
    "correlation_id",
    "subject",
    "priority",
    "creation_time",
    "absolute_expiry_time",
    "to",
    "reply_to",
    "user_id",
    "content_type",
    "group_id",
)
HEADERS: dict[str, Eval] = {
    "JMSMessageID": _field("message_id"),
    "JMSCorrelationID": _field("correlation_id"),
    "JMSType": _jms_type,
    "JMSPriority": _field("priority"),
    "JMSDeliveryMode": _delivery_mode,
    "JMSTimestamp": _field("creation_time"),
    "JMSExpiration": _field("absolute_expiry_time"),
    "amqp.delivery_mode": _delivery_mode,
    **{f"amqp.{name}": _field(name) for name in _AMQP_FIELDS},
}
"""Identifiers that name a field of the message rather than an application property."""


def _identifier(name: str) -> Eval:
    header = HEADERS.get(name)
    if header is not None:
        return header
    return lambda facts: scalar(facts.application_properties.get(name))


# --- parser ---------------------------------------------------------------------------------


def _like_pattern(pattern: str, escape: str | None, pos: int) -> re.Pattern[str]:
    parts: list[str] = []
    chars = iter(pattern)
    for ch in chars:
        if ch == escape:
            escaped = next(chars, None)
            if escaped is None:
                raise _error(pos, f"the pattern {pattern!r} ends with its escape character")
            parts.append(re.escape(escaped))
        elif ch == "%":
            parts.append(".*")
        elif ch == "_":
            parts.append(".")
        else:
            parts.append(re.escape(ch))
    return re.compile("".join(parts), re.DOTALL)


class _Parser:
    """Recursive descent over the tokens, one method per rule of the grammar above; each returns
    the expression's closure and what it is known to yield, so that nonsense like ``NOT 5`` or
    ``'a' + 1`` is refused at attach time."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.i = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.i]

    def take(self, kind: TokenKind, text: str | None = None) -> _Token | None:
        token = self.token
        if token.kind == kind and (text is None or token.text == text):
            self.i += 1
            return token
        return None

    def expect(self, kind: TokenKind, text: str, what: str) -> _Token:
        token = self.take(kind, text)
        if token is None:
            raise _error(self.token.pos, f"expected {what}, found {self.token.shown()}")
        return token

    def expect_end(self) -> None:
        if self.token.kind != "end":
            raise _error(self.token.pos, f"unexpected {self.token.shown()}")

    def check(self, token: _Token, kind: Kind, allowed: tuple[Kind, ...], role: str) -> None:
        if kind != "any" and kind not in allowed:
            raise _error(token.pos, f"{role} cannot be {_KIND_NAMES[kind]}")

    def disjunction(self) -> tuple[Eval, Kind]:
        start = self.token
        test, kind = self.conjunction()
        while self.take("kw", "OR") is not None:
            self.check(start, kind, ("bool",), "the operand of OR")
            right_start = self.token
            right, right_kind = self.conjunction()
            self.check(right_start, right_kind, ("bool",), "the operand of OR")
            test, kind = _or(test, right), "bool"
        return test, kind

    def conjunction(self) -> tuple[Eval, Kind]:
        start = self.token
        test, kind = self.negation()
        while self.take("kw", "AND") is not None:
            self.check(start, kind, ("bool",), "the operand of AND")
            right_start = self.token
            right, right_kind = self.negation()
            self.check(right_start, right_kind, ("bool",), "the operand of AND")
            test, kind = _and(test, right), "bool"
        return test, kind

    def negation(self) -> tuple[Eval, Kind]:
        if self.take("kw", "NOT") is None:
            return self.predicate()
        start = self.token
        inner, kind = self.negation()
        self.check(start, kind, ("bool",), "the operand of NOT")
        return _not(inner), "bool"

    def predicate(self) -> tuple[Eval, Kind]:
        start = self.token
        value, kind = self.sum()
        token = self.token
        if token.kind == "op" and token.text in _COMPARISONS:
            self.i += 1
            right_start = self.token
            right, right_kind = self.sum()
            if token.text not in ("=", "<>"):
                role = f"an operand of {token.text}"
                self.check(start, kind, ("num",), role)
                self.check(right_start, right_kind, ("num",), role)
            return _binary(_COMPARISONS[token.text], value, right), "bool"
        if token.kind != "kw":
            return value, kind
        if token.text == "IS":
            self.i += 1
            negated = self.take("kw", "NOT") is not None
            self.expect("kw", "NULL", "NULL after IS")
            null = _is_null(value)
            return (_not(null) if negated else null), "bool"
        negated = token.text == "NOT"
        if negated:
            self.i += 1
        test = self.range_test(start, value, kind)
        if test is None:
            if negated:
                raise _error(self.token.pos, "expected BETWEEN, IN or LIKE after NOT")
            return value, kind
        return (_not(test) if negated else test), "bool"

    def range_test(self, start: _Token, value: Eval, kind: Kind) -> Eval | None:
        """BETWEEN, IN or LIKE after `value`, if the next keyword is one of them."""
        if self.take("kw", "BETWEEN") is not None:
            self.check(start, kind, ("num",), "the operand of BETWEEN")
            low = self.bound()
            self.expect("kw", "AND", "AND in BETWEEN")
            return _between(value, low, self.bound())
        if self.take("kw", "IN") is not None:
            self.check(start, kind, ("str", "num"), "the operand of IN")
            self.expect("op", "(", "'(' after IN")
            options = [self.option()]
            while self.take("op", ",") is not None:
                options.append(self.option())
            self.expect("op", ")", "',' or ')' in the IN list")
            return _in(value, tuple(options))
        like = self.take("kw", "LIKE")
        if like is not None:
            self.check(start, kind, ("str",), "the operand of LIKE")
            pattern = self.string("a pattern after LIKE")
            escape: str | None = None
            if self.take("kw", "ESCAPE") is not None:
                escape_token = self.token
                escape = self.string("an escape character after ESCAPE")
                if len(escape) != 1:
                    raise _error(escape_token.pos, "ESCAPE takes a single character")
            return _like(value, _like_pattern(pattern, escape, like.pos))
        return None

    def bound(self) -> Eval:
        start = self.token
        bound, kind = self.sum()
        self.check(start, kind, ("num",), "a bound of BETWEEN")
        return bound

    def option(self) -> Scalar:
        token = self.take("str") or self.take("num")
        if token is None:
            raise _error(self.token.pos, f"expected a literal in IN, found {self.token.shown()}")
        return token.value

    def string(self, what: str) -> str:
        token = self.take("str")
        if token is None:
            raise _error(self.token.pos, f"expected {what}, found {self.token.shown()}")
        assert isinstance(token.value, str)
        return token.value

    def sum(self) -> tuple[Eval, Kind]:
        return self.arithmetic(("+", "-"), self.product)

    def product(self) -> tuple[Eval, Kind]:
        return self.arithmetic(("*", "/"), self.unary)

    def arithmetic(
        self, ops: tuple[str, ...], operand: Callable[[], tuple[Eval, Kind]]
    ) -> tuple[Eval, Kind]:
        start = self.token
        value, kind = operand()
        while self.token.kind == "op" and self.token.text in ops:
            op = self.token
            self.i += 1
            self.check(start, kind, ("num",), f"an operand of {op.text}")
            right_start = self.token
            right, right_kind = operand()
            self.check(right_start, right_kind, ("num",), f"an operand of {op.text}")
            compute = _arithmetic(_ARITHMETIC[op.text])
            value = _binary(compute, value, right)
            kind = "num"
        return value, kind

    def unary(self) -> tuple[Eval, Kind]:
        sign = self.take("op", "-") or self.take("op", "+")
        if sign is None:
            return self.atom()
        start = self.token
        value, kind = self.unary()
        self.check(start, kind, ("num",), f"the operand of unary {sign.text}")
        return (_negate(value) if sign.text == "-" else value), kind

    def atom(self) -> tuple[Eval, Kind]:
        token = self.token
        self.i += 1
        if token.kind == "id":
            return _identifier(token.text), "any"
        if token.kind == "str":
            return _constant(token.value), "str"
        if token.kind == "num":
            return _constant(token.value), "num"
        if token.kind == "kw" and token.text in ("TRUE", "FALSE"):
            return _constant(token.text == "TRUE"), "bool"
        if token.kind == "op" and token.text == "(":
            inner = self.disjunction()
            self.expect("op", ")", "')'")
            return inner
        if token.kind == "kw" and token.text == "NULL":
            raise _error(token.pos, "NULL is only allowed in IS [NOT] NULL")
        if token.kind == "kw":
            raise _error(token.pos, f"{token.shown()} is a keyword, not an identifier")
        raise _error(token.pos, f"expected a value, found {token.shown()}")


_KIND_NAMES: dict[Kind, str] = {
    "bool": "a boolean",
    "num": "a number",
    "str": "a string",
    "any": "a value",
}
