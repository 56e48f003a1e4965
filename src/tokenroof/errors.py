"""The one exception type for user mistakes: the CLI prints its message and exits non-zero.

A mistake in a value a caller passed is a `ParameterError`: the library names the parameter (`tp must be at least 1`,
what a Python caller passed), the command line and the local page name its flag (`--tp must be at least 1`, what a
user typed), from one template.
"""

from __future__ import annotations

# Parameters whose flag is not `--` + the name with dashes: the library's name → the command line's.
FLAGS = {
    "context_tokens": "--context",
    "rate_req_s": "--request-rate",
    "engine_file": "--engine",
    "eager": "--enforce-eager",
    "concurrencies": "--concurrency",
    "rates": "--request-rate",
    "timeout_s": "--timeout",
    "max_duration_s": "--max-duration",
}


class TokenroofError(Exception):
    """A problem with the user's input (a file, a name, a flag), described in one line."""

    def as_flags(self) -> str:
        """The message as the command line shows it (the same as `str` unless it names parameters)."""
        return str(self)


VERBATIM_BRACES = "\ue000"  # a private-use character standing for "{}" inside a value put in a template


def verbatim(value: object) -> str:
    """`value` as text to put in a ParameterError template: a `{}` in it (a file's value, a path) is not taken for a
    parameter's place, and shows as itself."""
    return str(value).replace("{}", VERBATIM_BRACES)


class ParameterError(TokenroofError):
    """A value passed for named parameters is wrong. `template` holds one `{}` per parameter, in order (nothing
    else in it is special: a path or a value with braces stays as it is, but a `{}` in a value put there must go
    through `verbatim`): `str()` fills them with the parameters' names, `as_flags()` with their command-line flags."""

    def __init__(self, template: str, *parameters: str) -> None:
        if template.count("{}") != len(parameters):
            raise ValueError(f"{template!r} has {template.count('{}')} '{{}}' for {len(parameters)} parameters")
        self.template, self.parameters = template, parameters
        super().__init__(self._filled(parameters))

    def _filled(self, words: tuple[str, ...]) -> str:
        parts = self.template.split("{}")
        text = parts[0] + "".join(w + part for w, part in zip(words, parts[1:], strict=True))
        return text.replace(VERBATIM_BRACES, "{}")

    def as_flags(self) -> str:
        return self._filled(tuple(flag_of(p) for p in self.parameters))


def flag_of(parameter: str) -> str:
    """`max_num_seqs` → `--max-num-seqs` (and the few that differ: FLAGS)."""
    return FLAGS.get(parameter, "--" + parameter.replace("_", "-"))


def prefixed(exc: TokenroofError, prefix: str) -> TokenroofError:
    """`exc` with `prefix` before its message (where it came from), its parameters still named."""
    if isinstance(exc, ParameterError):
        return ParameterError(prefix + exc.template, *exc.parameters)
    return TokenroofError(prefix + str(exc))
