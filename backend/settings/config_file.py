"""The config file: which one is read (``config_path``: ``--config FILE``, then ``SPECDECK_CONFIG``, then the
platform's user config dir, or the sandbox's own), loading it (a missing default file means "built-in defaults";
a missing explicit file is an error) and writing profiles, drafters and hosts back into it, keeping its comments
and layout, never a file that would not load.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from backend.errors import ConfigError
from backend.settings.model import PROFILE_FIELDS, DrafterConfig, ProfileConfig, Settings, builtin_defaults
from backend.settings.template import INIT_TEMPLATE
from backend.settings.validation import parse, ssh_url_problem

if TYPE_CHECKING:
    from tomlkit import TOMLDocument


def default_config_path() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir("specdeck")) / "config.toml"


def sandbox_config_path() -> Path:
    """The config `specdeck sandbox up` writes (backend/sandbox/environment.py keeps its sandbox beside it)."""
    from platformdirs import user_state_dir

    return Path(user_state_dir("specdeck")) / "sandbox" / "config.toml"


def is_sandbox_name(name: str | None) -> TypeGuard[str]:
    """``sandbox``, ``sandbox-2``, …: the names `sandbox up` gives its hosts."""
    return name is not None and (name == "sandbox" or (name.startswith("sandbox-") and name[8:].isdigit()))


def config_path(explicit: str | os.PathLike[str] | None = None, host: str | None = None) -> tuple[Path, bool]:
    """The config file to read and whether it must exist: ``--config``, ``SPECDECK_CONFIG``, else the user's
    file, except that ``--host sandbox`` (or ``sandbox-N``) reads the sandbox's own config unless the user's
    file names such a host itself: the sandbox is reachable by name after `sandbox up`, no path to copy."""
    if explicit:
        return Path(explicit).expanduser(), True
    if env := os.environ.get("SPECDECK_CONFIG"):
        return Path(env).expanduser(), True
    default = default_config_path()
    if is_sandbox_name(host) and not _names_host(default, host):
        return sandbox_config_path(), True
    return default, False


def _names_host(path: Path, name: str) -> bool:
    """Whether the config file at ``path`` has a ``[hosts.NAME]`` table (False when it cannot be read)."""
    import tomllib

    try:
        return name in tomllib.loads(path.read_text()).get("hosts", {})
    except (OSError, tomllib.TOMLDecodeError, AttributeError):
        return False


def load(explicit: str | os.PathLike[str] | None = None, host: str | None = None) -> Settings:
    """Read and validate the effective settings (defaults overlaid by the config file); ``host`` is the
    ``--host`` asked for (see ``config_path``)."""
    path, required = config_path(explicit, host)
    if not path.exists():
        if path == sandbox_config_path() and not explicit:
            raise ConfigError(f"there is no sandbox yet: run `specdeck sandbox up` first (it writes {path})")
        if required:
            raise ConfigError(f"config file {path} does not exist (run `specdeck config init --config {path}`)")
        return builtin_defaults()
    import tomllib  # here, not at the top: a command with no config file to read skips its ~5 ms import

    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror}") from None
    return parse(data, str(path))


# --- writing profiles back ---------------------------------------------------------------------------------

_SAVED = tuple(d.name for d in PROFILE_FIELDS if d.saved)


def save_profile(settings: Settings, profile: ProfileConfig) -> tuple[Settings, Path]:
    """Write ``profile`` into the config file ``settings`` came from (the default file, created from the init
    template, when they are the built-in defaults), keeping the file's comments and layout; returns the
    settings with the profile in them and the file written. Only keys that change are written (keys set to None
    are removed); env is left alone.

    Raises ConfigError when the file cannot be read or written, or the result would not validate."""
    import tomlkit

    def edit(doc: TOMLDocument) -> None:
        profiles = doc.setdefault("profiles", tomlkit.table(is_super_table=True))
        if profile.name not in profiles:
            profiles[profile.name] = tomlkit.table()
        table = profiles[profile.name]
        before = settings.profiles.get(profile.name) or ProfileConfig(name=profile.name)
        for key in _SAVED:
            value = getattr(profile, key)
            if key not in table and value == getattr(before, key):
                continue  # what the file leaves to the defaults stays left to them
            if key == "extra_args":
                value = list(value) or None
            elif isinstance(value, bool) and not value:
                value = None  # a switch left off is the default: the key goes
            if value is None:
                table.pop(key, None)
            elif table.get(key) != value:
                table[key] = value

    saved, path = _edit_config(settings, edit)
    return replace(settings, profiles={**settings.profiles, profile.name: saved.profiles[profile.name]}), path


def save_drafter(settings: Settings, drafter: DrafterConfig) -> tuple[Settings, Path]:
    """Write ``[drafters.NAME]`` (its repo, folder, revision and files: the defaults left out) into the config
    file as ``save_profile`` writes a profile; returns the settings with the drafter in them and the file."""
    import tomlkit

    def edit(doc: TOMLDocument) -> None:
        drafters = doc.setdefault("drafters", tomlkit.table(is_super_table=True))
        if drafter.name not in drafters:
            drafters[drafter.name] = tomlkit.table()
        table = drafters[drafter.name]
        for key, value in (("repo", drafter.repo), ("revision", drafter.revision), ("path", drafter.path)):
            if value is None:
                table.pop(key, None)
            elif table.get(key) != value:
                table[key] = value
        if drafter.files != DrafterConfig.files:
            table["files"] = list(drafter.files)
        else:
            table.pop("files", None)

    saved, path = _edit_config(settings, edit)
    return replace(settings, drafters={**settings.drafters, drafter.name: saved.drafters[drafter.name]}), path


def save_host(settings: Settings, name: str, url: str) -> tuple[Settings, Path]:
    """Add host ``name`` at ``url`` (an ssh:// address typed in the panel's host switcher) to the config file, as
    ``save_profile`` writes a profile; returns the settings with the host in them and the file written."""
    import tomlkit

    if problem := ssh_url_problem(url):
        raise ConfigError(problem)

    def edit(doc: TOMLDocument) -> None:
        hosts = doc.setdefault("hosts", tomlkit.table(is_super_table=True))
        if name in hosts:
            raise ConfigError(f"a host {name} is configured already: pick it in the host switcher")
        table = tomlkit.table()
        table["url"] = url
        hosts[name] = table

    saved, path = _edit_config(settings, edit)
    return replace(settings, hosts={**settings.hosts, name: saved.hosts[name]}), path


def _edit_config(settings: Settings, edit: Callable[[Any], None]) -> tuple[Settings, Path]:
    """Apply ``edit`` to the tomlkit document of ``settings``' config file and write it back (atomically, only
    if the result loads); returns the file's new settings and its path."""
    import tomlkit

    if settings.source == "built-in defaults":
        path = default_config_path()
    elif Path(settings.source).is_file():
        path = Path(settings.source)
    else:
        raise ConfigError(f"these settings were not read from a config file ({settings.source}): nothing to save to")
    try:
        text = path.read_text() if path.exists() else INIT_TEMPLATE
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror}") from None
    doc = tomlkit.parse(text)
    edit(doc)
    new_text = tomlkit.dumps(doc)
    import tomllib

    saved = parse(tomllib.loads(new_text), str(path))  # never write a file that would not load
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(new_text)
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write it: {exc.strerror}") from None
    return saved, path
