"""Regular-expression subscriptions of KIP-848 consumer groups: the dialect, validation
and resolution against the cluster's topic names (Kafka 4.0's
``GroupMetadataManager.refreshRegularExpressions`` and
``Utils.throwIfRegularExpressionIsInvalid``).

Sans-I/O and pure: no asyncio, no state. :mod:`odradek.coordinator.regex_worker` runs
these functions in a child process, so that no expression (RE2 compiles some short ones,
such as ``[a-z]{1,1000}`` repeated, in seconds, holding the GIL) can stall the broker's
event loop.

How it works:

- **Dialect: RE2** (the ``google-re2`` bindings of Google's RE2), as Kafka 4.0 uses RE2/J
  (``com.google.re2j.Pattern``), not ``java.util.regex``. RE2 refuses what would need
  backtracking: backreferences (``\\1``), lookahead and lookbehind (``(?=``, ``(?!``,
  ``(?<=``, ``(?<!``), possessive quantifiers (``a*+``) and atomic groups (``(?>``);
  counted repetitions are at most 1000. What it accepts matches in time linear in the
  name.
- **Full match.** A topic matches when the expression matches its *whole* name (Kafka's
  ``Matcher.matches()``): ``orders-.*`` matches ``orders-eu`` but not ``old-orders-eu``;
  ``^`` and ``$`` are accepted and change nothing.
- **Validation** (:func:`regex_error`): an expression RE2 does not compile is Kafka's
  INVALID_REGULAR_EXPRESSION with Kafka's message, "SubscribedTopicRegex `<regex>` is not
  a valid regular expression: <description>.", the description in RE2/J's words where
  RE2's differ (``missing closing ]``, not ``missing ]``).
- **Resolution** (:func:`resolve`): every topic name of the cluster is matched against
  all the expressions of a group at once (an RE2 set: one pass per name, whatever the
  number of expressions), in sets of at most :data:`SET_SIZE` expressions. Internal
  topics are not left out, as Kafka 4.0 does not leave them out (its image's
  ``topicsByName``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import re2

__all__ = ["MAX_REGEX_LENGTH", "SET_SIZE", "regex_error", "resolve"]

MAX_REGEX_LENGTH = 32_767
"""The longest SubscribedTopicRegex accepted, in UTF-8 bytes: the key of its
ConsumerGroupRegularExpression record holds it as a string of int16 length (Kafka has no
other bound; a longer one would not be written)."""

SET_SIZE = 256
"""Expressions matched together in one RE2 set (a set of many expressions can exceed
RE2's memory budget; a set that does is split in halves)."""

# RE2 (C++) describes errors in other words than RE2/J, which Kafka's message quotes.
_RE2J_DESCRIPTIONS = {
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "unexpected )": "missing closing )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
}


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would print each refused expression on stderr
    options.never_capture = True  # only whether it matches matters
    return options


def _description(error: Exception) -> str:
    raw = error.args[0] if error.args else str(error)
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    code = text.split(": ", 1)[0]
    return _RE2J_DESCRIPTIONS.get(code, code)


def regex_error(regex: str) -> str | None:
    """Kafka's message for a SubscribedTopicRegex that is not valid, None when it is.
    Compiling may take long for some expressions: call it where that cannot stall
    anything (the regex worker)."""
    size = len(regex.encode("utf-8", "surrogatepass"))
    if size > MAX_REGEX_LENGTH:
        return (f"SubscribedTopicRegex is {size} bytes long: at most {MAX_REGEX_LENGTH} "
                f"are accepted.")
    try:
        re2.compile(regex, _options())
    except re2.error as exc:
        return (f"SubscribedTopicRegex `{regex}` is not a valid regular expression: "
                f"{_description(exc)}.")
    return None


def _match_sets(regexes: list[str]) -> Iterable[tuple[list[str], re2.Set]]:
    """Compiled full-match sets over ``regexes`` (chunks of at most SET_SIZE; a chunk
    RE2 cannot compile is split; an expression that fails alone is left out)."""
    pending = [regexes[i:i + SET_SIZE] for i in range(0, len(regexes), SET_SIZE)]
    while pending:
        chunk = pending.pop()
        match_set = re2.Set.FullMatchSet(_options())
        try:
            for regex in chunk:
                match_set.Add(regex)
            match_set.Compile()
        except re2.error:
            if len(chunk) > 1:
                half = len(chunk) // 2
                pending += [chunk[:half], chunk[half:]]
            continue
        yield chunk, match_set


def resolve(regexes: Iterable[str], topic_names: Iterable[str]) -> dict[str, list[str]]:
    """The topic names each expression fully matches (Kafka's
    ``refreshRegularExpressions``); an expression that does not compile matches none."""
    wanted = sorted(set(regexes))
    out: dict[str, list[str]] = {regex: [] for regex in wanted}
    names = list(topic_names)
    for chunk, match_set in _match_sets(wanted):
        match = match_set.Match
        for name in names:
            hits = match(name)
            if hits:
                for index in hits:
                    out[chunk[index]].append(name)
    return out


def resolution_topics(resolved: Mapping[str, Iterable[str]]) -> frozenset[str]:
    """Every topic some expression matched."""
    return frozenset(t for topics in resolved.values() for t in topics)
