"""Generate specdeck's SGLang flag tables from SGLang's own wheels.

    pip download --no-deps sglang==0.5.6 sglang==0.5.23 -d wheels/      # the wheels, from PyPI
    pip install msgspec                                                 # 0.5.23's arg_groups need it
    python scripts/sglang_flag_tables.py wheels/sglang-0.5.6-*.whl wheels/sglang-0.5.23-*.whl
    python scripts/sglang_flag_tables.py --parse argvs.json wheels/sglang-0.5.23-*.whl  # SGLang's own parser

The first form
writes ``backend/sglang/flag_data/v<version>.json`` for each wheel: every option ``ServerArgs.add_cli_args``
registers, in order, with its option strings, dest, type, choices, default, nargs, const, required, the
first sentence of its help, and the file and function of the wheel that registered it.

How: the wheel is unpacked to a temporary folder and SGLang's own ``ServerArgs.add_cli_args`` runs against a
recording parser, so the table is what that release's ``launch_server --help`` would list. SGLang's heavy
imports (torch, transformers, CUDA kernels…) are replaced by inert stand-ins while the module loads: nothing
of them is called to build the parser. Choices computed from a registry at that moment (reasoning and
tool-call parsers) are kept when they came out as strings and left open otherwise (the host's ``--help``
decides those). The wheels are not committed; only this script and its output are.

``--parse FILE WHEEL``: FILE holds a JSON list of launch argument lists; each is parsed by the parser the wheel's
own ``ServerArgs.add_cli_args`` builds (a plain ``ArgumentParser``, as ``launch_server`` makes it), and one JSON
line per list says whether it parsed and, if so, the values of its ``speculative_*`` dests (else argparse's
error). tests/test_profiles.py runs this when ``SPECDECK_SGLANG_WHEEL`` names a wheel.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import tempfile
import types
import zipfile
from pathlib import Path
from typing import Any
from unittest import mock

OUT = Path(__file__).resolve().parents[1] / "backend" / "sglang" / "flag_data"
# What loads for real from the wheel: the modules add_cli_args is made of. Everything else under sglang (and
# every third-party module that is missing here) is a stand-in.
REAL = (
    "sglang.srt.server_args",
    "sglang.srt.arg_groups",
    "sglang.srt.environ",
)
_TYPE_NAMES = {str: "str", int: "int", float: "float"}
# SGLang's parser functions and actions -> the names backend.sglang.flags parses with; others keep their own
# name (specdeck reads their values as strings and lets the host's SGLang judge them).
_PARSERS = {
    "loads": "json",
    "json_list_type": "json_list",
    "nullable_str": "nullable_str",
    "LoRAPathAction": "lora_paths",
}


class _Stand(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Loads only the ``REAL`` modules from the wheel: the packages above them as empty shells (their
    ``__init__`` would import the world), anything else missing as a ``MagicMock`` module."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if any(name == r or name.startswith(r + ".") for r in REAL):
            return None  # the wheel's own file, found through the shell package's __path__
        if any(r.startswith(name + ".") for r in REAL):
            spec = importlib.machinery.ModuleSpec(name, self, is_package=True)
            spec.submodule_search_locations = [str(self.root.joinpath(*name.split(".")))]
            return spec
        if not name.startswith("sglang") and importlib.machinery.PathFinder.find_spec(name, path) is not None:
            return None  # stdlib and what is installed here (msgspec, typing_extensions…)
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if spec.submodule_search_locations:  # a shell package
            module = types.ModuleType(spec.name)
            module.__path__ = list(spec.submodule_search_locations)
        else:
            module = mock.MagicMock(name=spec.name)
            module.__path__ = []
            module.__name__ = spec.name
        module.__spec__ = spec
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _Recorder(argparse.ArgumentParser):
    """An ArgumentParser that remembers which file and function of the wheel registered each option."""

    def __init__(self, root: Path) -> None:
        super().__init__(prog="sglang.launch_server", add_help=False)
        self.root = root
        self.sources: dict[str, str] = {}

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        frame = sys._getframe(1)
        while frame is not None and not frame.f_code.co_filename.startswith(str(self.root)):
            frame = frame.f_back
        if frame is not None:
            path = Path(frame.f_code.co_filename).relative_to(self.root)
            self.sources[action.dest] = f"{path}:{frame.f_code.co_name}"
            declared = frame.f_locals.get("field")
            if frame.f_code.co_name == "add_cli_args_from_dataclass" and declared is not None:
                # Registered from a field declaration: name the class (and its file) that declares the field.
                self.sources[action.dest] = _declaration(declared.name) or self.sources[action.dest]
        return action


def _declaration(name: str) -> str | None:
    """``sglang/srt/arg_groups/fields/spec.py:Spec.speculative_num_steps`` for a field of 0.5.23's namespaces."""
    for module in list(sys.modules.values()):
        if not getattr(module, "__name__", "").startswith("sglang.srt.arg_groups.fields"):
            continue
        for value in vars(module).values():
            declared_here = isinstance(value, type) and value.__module__ == module.__name__
            if declared_here and name in getattr(value, "__struct_fields__", ()):
                return f"{module.__name__.replace('.', '/')}.py:{value.__name__}.{name}"
    return None


def _first_sentence(text: str | None) -> str:
    text = " ".join((text or "").split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _plain(value: Any) -> Any:
    """A JSON value for a default/const/choice, or None where it is not plain data (a stand-in, an object)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        items = [_plain(v) for v in value]
        return items if all(i is not None for i in items) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return None


def _type_name(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "switch"
    if isinstance(action, argparse._StoreFalseAction):
        return "switch_off"
    if type(action).__module__.startswith("sglang"):
        name = type(action).__name__
    elif action.type is None:
        return "str"
    elif isinstance(action.type, mock.Mock):  # a parser function of a module that was stood in for
        name = action.type._extract_mock_name().rsplit(".", 1)[-1]
    else:
        name = _TYPE_NAMES.get(action.type) or getattr(action.type, "__name__", "str")
    return _PARSERS.get(name, name)


def _parser(wheel: Path, root: Path) -> tuple[str, _Recorder]:
    """The wheel's version and the parser its own ``ServerArgs.add_cli_args`` builds (unpacked into ``root``)."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(root)
    metadata = next(root.glob("sglang-*.dist-info/METADATA")).read_text()
    version = next(line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Version:"))
    finder = _Stand(root)
    saved = dict(sys.modules)
    sys.path.insert(0, str(root))
    sys.meta_path.insert(0, finder)
    try:
        server_args = importlib.import_module("sglang.srt.server_args")
        parser = _Recorder(root)
        server_args.ServerArgs.add_cli_args(parser)
    finally:
        sys.meta_path.remove(finder)
        sys.path.remove(str(root))
        for name in set(sys.modules) - set(saved):
            del sys.modules[name]
    return version, parser


def parse_with_wheel(wheel: Path, argvs: list[list[str]]) -> list[dict[str, Any]]:
    """Each argument list parsed by the wheel's own parser: ``{"ok", "speculative"}`` or ``{"ok", "error"}``."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        _, parser = _parser(wheel, Path(tmp))

        class Refused(Exception):
            pass

        def error(message: str) -> None:
            raise Refused(message)

        parser.error = error  # type: ignore[method-assign]
        for argv in argvs:
            try:
                values = vars(parser.parse_args(argv))
            except Refused as exc:
                results.append({"ok": False, "error": str(exc)})
                continue
            spec = {k: _plain(v) for k, v in values.items() if k.startswith("speculative_")}
            results.append({"ok": True, "speculative": spec})
    return results


def table(wheel: Path) -> dict[str, Any]:
    """Every option of the wheel's ``ServerArgs.add_cli_args``, read by running it."""
    with tempfile.TemporaryDirectory() as tmp:
        version, parser = _parser(wheel, Path(tmp))
        flags = []
        for action in parser._actions:
            if not action.option_strings:
                continue
            # Choices from a registry that was stood in for come out empty: left open (the host decides).
            listed = sorted(action.choices, key=str) if isinstance(action.choices, set | frozenset) else action.choices
            choices = _plain(list(listed)) if listed else None
            flags.append(
                {
                    "names": list(action.option_strings),
                    "dest": action.dest,
                    "type": _type_name(action),
                    "help": _first_sentence(action.help),
                    "default": _plain(action.default),
                    "choices": choices,
                    "nargs": action.nargs if isinstance(action.nargs, str) else None,
                    "const": _plain(action.const),
                    "required": bool(action.required),
                    "source": parser.sources.get(action.dest, "?"),
                }
            )
    return {
        "version": version,
        "wheel": wheel.name,
        "generated_by": "scripts/sglang_flag_tables.py",
        "flags": flags,
    }


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    if argv[0] == "--parse" and len(argv) == 3:
        for result in parse_with_wheel(Path(argv[2]), json.loads(Path(argv[1]).read_text())):
            print(json.dumps(result))
        return 0
    OUT.mkdir(exist_ok=True)
    for name in argv:
        data = table(Path(name))
        out = OUT / f"v{data['version']}.json"
        out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{out}: {len(data['flags'])} flags of sglang {data['version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
