"""`--config FILE`: any command's flags from a TOML file, as GuideLLM's scenarios and vLLM's `--config` YAML.

    # scenario.toml: keys are long flags without the dashes (`request-rate` or `request_rate`)
    model = "llama-3.1-8b"        # top level: every command that has the flag
    hardware = "h100-sxm"

    [simulate]                    # a table: that command only (it wins over the top level)
    request-rate = [10, 40]       # a list where the flag takes one ('10,40')
    num-requests = 2000

    [plan]
    request-rate = 40

`tokenroof --config scenario.toml simulate` (or `tokenroof simulate --config scenario.toml`): flags given on the
command line win over the file, and a key that names no flag of any command (or of the table's command) is a
one-line error naming the file and the flags that command has.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from tokenroof.errors import TokenroofError
from tokenroof.params import check_flags

# flags that mean something else on one command, so a top-level key does not reach them (a [command] table does):
# bench's --model is the id the server answers to (as vllm bench serve's), not a model preset
LOCAL = {("bench", "model")}
# flags whose meaning differs by command, so a top-level key is refused, not spread (a [command] table gives them):
# --out (bench's folder, bench-local's CSV, calibrate's TOML, report's page, simulate's files), --warmup (bench's
# requests, bench-local's steps), --workers (bench's client processes, plan's search processes)
TABLE_ONLY = {
    "out": "bench's folder, bench-local's CSV, calibrate's hardware file, report's page",
    "warmup": "bench's requests, bench-local's steps",
    "workers": "bench's client processes, plan's search processes",
}


def options_by_command(group: Any) -> dict[str, dict[str, Any]]:
    """Each command's options (not its arguments) by parameter name (`request_rate`). Duck-typed: Typer runs its
    own copy of click, whose classes are not click's."""
    found: dict[str, dict[str, Any]] = {}
    for name, command in group.commands.items():
        options = found.setdefault(name, {})
        for p in command.params:
            if not p.name or p.param_type_name != "option":
                continue
            options[p.name] = p  # `--json` is json_output: its flag names it too
            options.update({o[2:].replace("-", "_"): p for o in p.opts if o.startswith("--")})
    return found


def flag(param: Any) -> str:
    """The option's first long flag, without its dashes."""
    return next(o[2:] for o in param.opts if o.startswith("--"))


def value_for(param: Any, value: Any, where: str) -> Any:
    """A TOML value as the option takes it: a list joins with commas where the option takes one string."""
    if isinstance(value, dict):
        raise TokenroofError(f"{where}: a table where a flag's value belongs")
    switch = bool(getattr(param, "is_bool_flag", False))  # --json, --plot: true or false, nothing else
    if switch != isinstance(value, bool):
        wanted = "true or false" if switch else "a value, not true or false"
        raise TokenroofError(f"{where}: the flag takes {wanted}, got {value!r}")
    if isinstance(value, list) and not param.multiple:
        if any(isinstance(v, dict | list) for v in value):
            raise TokenroofError(f"{where}: a list of plain values, got {value!r}")
        value = ",".join(str(v) for v in value)
    if param.multiple and not isinstance(value, list):
        value = [value]
    if not switch:  # the flag's own type and range, and tokenroof's (FLAG_RANGES), checked here: named so
        try:
            converted = coerce(param, value)  # a repeated flag's list coerced whole
        except Exception as exc:  # click's BadParameter (Typer's copy of click: duck-typed)
            message = getattr(exc, "message", None) or str(exc)
            raise TokenroofError(f"{where}: {message}, got {value!r}") from None
        try:
            for one in converted if param.multiple else [converted]:
                check_flags({param.name: one})
        except TokenroofError as exc:
            raise TokenroofError(f"{where}: {exc}") from None
    return value


def coerce(param: Any, value: Any) -> Any:
    """The value as the option's type and range take it (raises as the command line would): Typer 0.29's runtime
    parameter, or click's `type.convert` where an older Typer has one."""
    runtime = getattr(param, "get_runtime_param", None)
    if runtime is not None:
        return runtime().coerce(value, param=param, ctx=None)
    return param.type.convert(value, param, None)


def default_map(path: Path, group: Any, running: str | None = None) -> dict[str, dict[str, Any]]:
    """The file as click's default_map: {command: {parameter: value}}, checked against the commands' options and
    their types. A top-level key reaches every command with the flag; where one of them cannot take its value (a
    list where that command takes one number), that command alone goes without it, and it is an error only when it
    is the command `running` (None: not known, as under --help)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark (Windows editors) is no key
    except FileNotFoundError:
        raise TokenroofError(f"--config {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenroofError(f"--config {path}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise TokenroofError(f"--config {path}: not TOML: {exc}") from None
    commands = options_by_command(group)
    shared = {k: v for k, v in data.items() if not (isinstance(v, dict) and k in commands)}
    tables = {k: v for k, v in data.items() if isinstance(v, dict) and k in commands}
    result: dict[str, dict[str, Any]] = {name: {} for name in commands}

    # one flag given twice in one place (request-rate and request_rate, or rate): refused, not last-one-wins
    every = {name: p for opts in commands.values() for name, p in opts.items()}  # a top-level key's flag, any command's
    for where, options, keys in [("", every, shared), *((f"[{c}] ", commands[c], t) for c, t in tables.items())]:
        seen: dict[str, str] = {}
        for key in keys:
            param = options.get(key.replace("-", "_"))
            if param is None:
                continue
            if param.name in seen:
                raise TokenroofError(
                    f"{path}: {where}'{seen[param.name]}' and '{key}' are one flag (--{flag(param)}): give it once"
                )
            seen[param.name] = key

    def in_table(command: str, name: str) -> bool:  # the command's own table sets it: that value wins, not this
        return any(k.replace("-", "_") in (name, commands[command][name].name) for k in tables.get(command, {}))

    for key, value in shared.items():
        name = key.replace("-", "_")
        if name in TABLE_ONLY:
            raise TokenroofError(
                f"{path}: '{key}' means something else on each command ({TABLE_ONLY[name]}): give it in the "
                "[command] table it is for"
            )
        takers = [c for c, opts in commands.items() if name in opts and name != "config" and (c, name) not in LOCAL]
        if not takers:
            raise TokenroofError(
                f"{path}: '{key}' is neither a command's table nor a flag of any command "
                f"(commands: {', '.join(sorted(commands))})"
            )
        takers = [c for c in takers if not in_table(c, name)]
        for command in takers:
            param = commands[command][name]
            where = f"{path}: {key}" + (f" (for {command})" if len(takers) > 1 else "")
            try:
                result[command][param.name] = value_for(param, value, where)
            except TokenroofError:
                if command == running or len(takers) == 1:
                    raise
    for command, table in tables.items():
        for key, value in table.items():
            name = key.replace("-", "_")
            if name not in commands[command] or name == "config":
                known = ", ".join(sorted({flag(p) for p in commands[command].values()}))
                raise TokenroofError(
                    f"{path}: [{command}] {key}: `tokenroof {command}` has no such flag; it has: {known}"
                )
            param = commands[command][name]
            result[command][param.name] = value_for(param, value, f"{path}: [{command}] {key}")
    return {c: v for c, v in result.items() if v}


def split_config(argv: list[str]) -> tuple[list[str], Path | None]:
    """Take `--config FILE` (or `--config=FILE`) out of the arguments, wherever it stands."""
    rest: list[str] = []
    path = None
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--config":
            if i + 1 >= len(argv):
                raise TokenroofError("--config needs a file")
            path = Path(argv[i + 1])
            i += 2
            continue
        if token.startswith("--config="):
            path = Path(token.split("=", 1)[1])
        else:
            rest.append(token)
        i += 1
    return rest, path
